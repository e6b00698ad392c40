# call H: the rule as landed (CL_ISOLATE_SK=2: a lone Sinkhorn warp's scheduler left to it in the one- and two-row
# builds of one or two ranks): TP2 exactness (random cycles, FMA build, watchdog) and step profiles at TP2 M=1/2;
# three rounds alternating the default and CL_ISOLATE_SK=0 (the rule before) at TP1 and TP2 M=1/2/4/8; TP4 M=1/2/4/8
# (same code either way: a control)
S=/tmp/eH; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
timeout 150 python3 tools/cluster_check.py --tp 2 --cases 3 --seed 79 --profile-rows 1 2 > $S/check-tp2.log 2>&1; echo "check tp2 rc=$? $((SECONDS-t0))s"
for k in 1 2 3; do for v in new old; do
  d=""; [ $v = old ] && d=CL_ISOLATE_SK=0
  for tp in 1 2; do
    DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --tp $tp --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp$tp-$v-$k.log 2>&1; echo "tp$tp $v $k rc=$? $((SECONDS-t0))s"
  done
  [ $((SECONDS-t0)) -gt 450 ] && break 2
done; done
timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-new-1.log 2>&1; echo "tp4 rc=$? $((SECONDS-t0))s"
tar czf $OUT/eH.tgz -C /tmp eH
grep "^| random\|^| FMA\|^| watchdog" $S/check-tp2.log | cut -c1-160
grep "^| TP[124] M=[0-9] |" $S/check-tp2.log | cut -c1-330
for f in $S/tp*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
