# call 2: the GPU tests on this tree; where the step's time goes at the cycle level (timing ablations, inexact:
# no Sinkhorn iterations, the fold without waiting for the other ranks' words, both) at TP4 M=2/8 and TP1 M=2;
# the stamp profile at M=2
S=$OUT/e2; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q tests/test_cuda.py > $S/test_cuda.log 2>&1; echo "test_cuda rc=$? $((SECONDS-t0))s"; tail -2 $S/test_cuda.log
B="--rows 2 8 --epochs 30 --only-main --no-torch --persistent-cluster"
for v in default ABL_NO_SINKHORN CL_LL_NOWAIT "ABL_NO_SINKHORN CL_LL_NOWAIT"; do
  n=$(echo $v | tr ' ' '+'); d=$v; [ "$v" = default ] && d=""
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 100 python3 tools/bench_replay.py $B > $S/tp4-$n.log 2>&1; echo "tp4 $n rc=$? $((SECONDS-t0))s"
done
for v in default ABL_NO_SINKHORN; do
  d=$v; [ "$v" = default ] && d=""
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 100 python3 tools/bench_replay.py --tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp1-$v.log 2>&1; echo "tp1 $v rc=$? $((SECONDS-t0))s"
done
timeout 120 python3 tools/cluster_check.py --cases 0 --profile-rows 2 --json $S/profile.json > $S/profile.log 2>&1; echo "profile rc=$? $((SECONDS-t0))s"
for f in $S/tp4-*.log $S/tp1-*.log; do echo "== $(basename $f)"; grep "persistent-cluster" $f | tail -2; done
grep "^|" $S/profile.log | head -30
