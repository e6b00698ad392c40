# call G: the new default (CL_ISOLATE_SK=2: a lone Sinkhorn warp's scheduler left to it in builds of one rank):
# TP1 exactness (random cycles, FMA build, watchdog) and step profiles at TP1 M=1/2/4/8; three rounds alternating the
# default, CL_ISOLATE_SK=0 (the rule before) and CL_ISOLATE_SK=1 (also two Sinkhorn warps, every build) at TP1
# M=1/2/4/8; two rounds of CL_ISOLATE_SK=0 / 1 at TP2 M=1/2/4/8 (whether two ranks should take it)
S=/tmp/eG; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
timeout 150 python3 tools/cluster_check.py --tp 1 --cases 3 --seed 78 --profile-rows 1 2 4 8 > $S/check-tp1.log 2>&1; echo "check tp1 rc=$? $((SECONDS-t0))s"
for k in 1 2 3; do for v in 2 0 1; do
  d=""; [ $v != 2 ] && d=CL_ISOLATE_SK=$v
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --tp 1 --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp1-iso$v-$k.log 2>&1; echo "tp1 iso$v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt 400 ] && break 2
done; done
for k in 1 2; do for v in 0 1; do
  DECODER_SHELL_CUDA_DEFINES="CL_ISOLATE_SK=$v" timeout 60 python3 tools/bench_replay.py --tp 2 --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp2-iso$v-$k.log 2>&1; echo "tp2 iso$v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt 540 ] && break 2
done; done
tar czf $OUT/eG.tgz -C /tmp eG
grep "^| random\|^| FMA\|^| watchdog" $S/check-tp1.log | cut -c1-160
grep "^| TP[124] M=[0-9] |" $S/check-tp1.log | cut -c1-330
for f in $S/tp*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
