# call 5: div_shorter (SINKHORN_DIV_SHORT=2, the correction applied to the first estimate) over every mantissa pair;
# only if no pair differs: the Sinkhorn micro-bench, TP1 M=2 against the short quotient (alternating) and the
# cluster cycle's random check, built with it
S=$OUT/e5; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 150 python3 tools/div_check.py --form shorter --json $S/div.json > $S/div.log 2>&1; rc=$?; echo "div rc=$rc $((SECONDS-t0))s"; grep "^|" $S/div.log
[ $rc = 0 ] || exit 0
DECODER_SHELL_CUDA_DEFINES=SINKHORN_DIV_SHORT=2 timeout 60 python3 tools/sinkhorn_bench.py --no-registers > $S/sk.log 2>&1; echo "sk rc=$? $((SECONDS-t0))s"
grep "| piece\|sinkhorn_lane whole\|^| exact" $S/sk.log
B1="--tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster"
for k in 1 2 3; do
  timeout 60 python3 tools/bench_replay.py $B1 > /tmp/short$k.log 2>&1
  DECODER_SHELL_CUDA_DEFINES=SINKHORN_DIV_SHORT=2 timeout 60 python3 tools/bench_replay.py $B1 > /tmp/shorter$k.log 2>&1
done; echo "tp1 $((SECONDS-t0))s"
cat /tmp/short*.log /tmp/shorter*.log > $S/tp1.log
for f in /tmp/short*.log /tmp/shorter*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
DECODER_SHELL_CUDA_DEFINES=SINKHORN_DIV_SHORT=2 timeout 90 python3 tools/cluster_check.py --cases 2 --seed 7 --profile-rows 2 > $S/cluster.log 2>&1; echo "cluster rc=$? $((SECONDS-t0))s"
grep "^|" $S/cluster.log | head -5
