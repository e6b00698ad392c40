# call E: the candidate rule (CL_ISOLATE_SK=3 CL_ISO_KEEP=1: in every one- and two-row build, a lone Sinkhorn warp
# shares its scheduler with one helper warp instead of three) against the default, four rounds alternating, TP4
# M=1/2/4/8 (4/8: the same code, controls), TP2 and TP1 M=1/2; TP2 exactness of the candidate first
S=/tmp/eE; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
DECODER_SHELL_CUDA_DEFINES="CL_ISOLATE_SK=3 CL_ISO_KEEP=1" timeout 120 python3 tools/cluster_check.py --tp 2 --cases 2 --seed 87 --profile-rows 2 > $S/check-tp2-cand.log 2>&1; echo "check tp2 rc=$? $((SECONDS-t0))s"
for k in 1 2 3 4; do for v in def cand; do
  d=""; [ $v = cand ] && d="CL_ISOLATE_SK=3 CL_ISO_KEEP=1"
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$v-$k.log 2>&1; echo "tp4 $v $k rc=$? $((SECONDS-t0))s"
  for tp in 2 1; do
    DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --tp $tp --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp$tp-$v-$k.log 2>&1; echo "tp$tp $v $k rc=$? $((SECONDS-t0))s"
  done
  [ $((SECONDS-t0)) -gt 330 ] && break 2
done; done
tar czf $OUT/eE.tgz -C /tmp eE
grep "^| random\|^| FMA\|^| watchdog" $S/check-tp2-cand.log | cut -c1-120; grep "^| TP[124] M=[0-9] |" $S/check-tp2-cand.log | cut -c1-500
for f in $S/tp*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
