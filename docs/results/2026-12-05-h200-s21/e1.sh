# call 1: the stream values two a conversion (f2bf2, CL_SV_PAIRS) and the next step's header on one branch, with the
# roles carried (the twentieth session's call 1, 2026-12-05-h200-s20/). Exactness: f2bf2 over every input of either half (bf16_check), random cycles + FMA build +
# watchdog (cluster_check), the dsv4-flash TP4 replay with changed epochs; then the cycle at TP4 M=1/2/4/8 against
# 59b44e0 (.ab/base) and CL_SV_PAIRS=0, two rounds alternating; stamp profiles; Nsight Compute at M=2
S=/tmp/e1; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 60 python3 tools/bf16_check.py > $S/bf16.log 2>&1; echo "bf16 rc=$? $((SECONDS-t0))s"
timeout 120 python3 tools/cluster_check.py --cases 2 --seed 47 --profile-rows > $S/check.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
python3 -m decoder_shell.cli synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 --out /tmp/f4 > $S/synth.log 2>&1
timeout 150 python3 -m decoder_shell.cli replay /tmp/f4 --driver cuda --placement emulated --epochs 70 --changed 16 --cycle persistent-cluster > $S/dv.log 2>&1; echo "dv rc=$? $((SECONDS-t0))s"
for k in 1 2; do for v in base new nopairs; do
  d=.; def=""; [ $v = base ] && d=.ab/base; [ $v = nopairs ] && def="CL_SV_PAIRS=0"
  (cd $d && DECODER_SHELL_CUDA_DEFINES="$def" timeout 90 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster) > $S/tp4-$v-$k.log 2>&1; echo "bench $v $k rc=$? $((SECONDS-t0))s"
done; done
for v in base new nopairs; do
  d=.; def=""; [ $v = base ] && d=.ab/base; [ $v = nopairs ] && def="CL_SV_PAIRS=0"
  (cd $d && DECODER_SHELL_CUDA_DEFINES="$def" timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8) > $S/profile-$v.log 2>&1; echo "profile $v rc=$? $((SECONDS-t0))s"
done
OUT=$S/ncu ROWS="2" timeout 100 bash tools/gpu_cluster_ncu.sh > $S/ncu.log 2>&1; echo "ncu rc=$? $((SECONDS-t0))s"
tar czf $OUT/e1.tgz -C /tmp e1
tail -4 $S/bf16.log; grep "^| random\|^| FMA\|^| watchdog" $S/check.log | cut -c1-200; tail -3 $S/dv.log | cut -c1-300
for f in $S/tp4-*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
for f in $S/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=[28] |" $f | cut -c1-250; done
grep -E "Duration|Warp Cycles Per Issued" $S/ncu/m*/details.txt | head -4
# (run as /tmp/e2 in the call, whose tarball unpacked here as call1-e1/; the names here are this folder's)
