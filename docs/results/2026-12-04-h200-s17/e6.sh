# call 6: where the Sinkhorn is the step's chain (TP1 M=2): the Sinkhorn warp's scheduler to itself (CL_ISOLATE_SK=1)
# and its loop unrolled by 8 (SINKHORN_UNROLL=8) against the default, alternating; TP4 M=2/8 with each
S=$OUT/e6; mkdir -p $S /tmp/e6
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e6/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
B1="--tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster"
for k in 1 2 3; do
  for v in default CL_ISOLATE_SK=1 SINKHORN_UNROLL=8; do
    d=$v; [ $v = default ] && d=""
    DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py $B1 > /tmp/e6/tp1-$v-$k.log 2>&1
  done
done; echo "tp1 $((SECONDS-t0))s"
B4="--rows 2 8 --epochs 30 --only-main --no-torch --persistent-cluster"
for v in default CL_ISOLATE_SK=1 SINKHORN_UNROLL=8; do
  d=$v; [ $v = default ] && d=""
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 80 python3 tools/bench_replay.py $B4 > /tmp/e6/tp4-$v.log 2>&1
done; echo "tp4 $((SECONDS-t0))s"
tar czf $S/logs.tgz -C /tmp e6
for f in /tmp/e6/tp1-*.log /tmp/e6/tp4-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
