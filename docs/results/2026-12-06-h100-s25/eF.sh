# call F: the helpers off the Sinkhorn warp's scheduler (CL_ISOLATE_SK=1: at one and two Sinkhorn warps, the warps
# sharing their sub-partitions make no y and fold nothing) against the default, alternating, TP4 M=1/2/4/8 and TP1 M=2,
# and its step profile at TP4 M=1/2
S=/tmp/eF; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
DECODER_SHELL_CUDA_DEFINES=CL_ISOLATE_SK=1 timeout 100 python3 tools/cluster_check.py --cases 1 --seed 77 --profile-rows 1 2 > $S/check-iso.log 2>&1; echo "check iso rc=$? $((SECONDS-t0))s"
for k in 1 2 3; do for v in def iso; do
  d=""; [ $v = iso ] && d=CL_ISOLATE_SK=1
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 80 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/ab-$v-$k.log 2>&1; echo "bench $v $k rc=$? $((SECONDS-t0))s"
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 50 python3 tools/bench_replay.py --tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster > $S/ab1-$v-$k.log 2>&1; echo "bench1 $v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt 520 ] && break 2
done; done
tar czf $OUT/eF.tgz -C /tmp eF
grep "^| random\|^| FMA\|^| watchdog" $S/check-iso.log | cut -c1-160
grep "^| TP[14] M=[0-9] |" $S/check-iso.log | cut -c1-330
for f in $S/ab*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
