# call C: the join's words loaded and polled in rank order (CL_LL_RANKORD=1, the new default: ring_rotate puts them in
# each element's fold order) against the fold order (CL_LL_RANKORD=0: the code before, the same SASS as 5cb8ebe);
# exactness of the new default at TP4 and TP2 (random cycles, both ring directions, the FMA build, the watchdog) with
# its step profiles, then four rounds alternating, TP4 M=1/2/4/8 and TP2 M=2/8
S=/tmp/eC; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
timeout 150 python3 tools/cluster_check.py --cases 3 --seed 91 --profile-rows 2 8 > $S/check-tp4.log 2>&1; echo "check tp4 rc=$? $((SECONDS-t0))s"
timeout 100 python3 tools/cluster_check.py --tp 2 --cases 2 --seed 92 --profile-rows 8 > $S/check-tp2.log 2>&1; echo "check tp2 rc=$? $((SECONDS-t0))s"
DECODER_SHELL_CUDA_DEFINES="CL_LL_RANKORD=0" timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > $S/profile-old.log 2>&1; echo "profile old rc=$? $((SECONDS-t0))s"
for k in 1 2 3 4; do for v in new old; do
  d=""; [ $v = old ] && d="CL_LL_RANKORD=0"
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$v-$k.log 2>&1; echo "tp4 $v $k rc=$? $((SECONDS-t0))s"
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --tp 2 --rows 2 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp2-$v-$k.log 2>&1; echo "tp2 $v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt 470 ] && break 2
done; done
tar czf $OUT/eC.tgz -C /tmp eC
grep "^| random\|^| FMA\|^| watchdog" $S/check-tp4.log $S/check-tp2.log | cut -c1-140
grep "^| TP[124] M=[0-9] |" $S/check-tp4.log $S/check-tp2.log $S/profile-old.log | cut -c1-420
for f in $S/tp*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
