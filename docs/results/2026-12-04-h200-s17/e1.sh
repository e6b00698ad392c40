# call 1: the short quotient checked over every mantissa pair, the Sinkhorn micro-bench in both quotient forms,
# and the cluster cycle at TP4 M=1/2/4/8: the tree before this session, this tree, the probing fold, the short quotient
S=$OUT/e1; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p /tmp/old && tar xzf .ab/t-642561d.tgz -C /tmp/old
timeout 150 python3 tools/div_check.py --json $S/div.json > $S/div.log 2>&1; echo "div rc=$? $((SECONDS-t0))s"; grep "^|" $S/div.log
timeout 90 python3 tools/sinkhorn_bench.py --no-registers --json $S/sk-default.json > $S/sk-default.log 2>&1; echo "sk rc=$? $((SECONDS-t0))s"
DECODER_SHELL_CUDA_DEFINES=SINKHORN_DIV_SHORT=1 timeout 90 python3 tools/sinkhorn_bench.py --no-registers --json $S/sk-short.json > $S/sk-short.log 2>&1; echo "sk-short rc=$? $((SECONDS-t0))s"
B="--rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster"
(cd /tmp/old && timeout 120 python3 tools/bench_replay.py $B > $S/old.log 2>&1); echo "old rc=$? $((SECONDS-t0))s"
timeout 120 python3 tools/bench_replay.py $B > $S/new.log 2>&1; echo "new rc=$? $((SECONDS-t0))s"
DECODER_SHELL_CUDA_DEFINES=CL_LL_PROBE=1 timeout 120 python3 tools/bench_replay.py $B > $S/probe.log 2>&1; echo "probe rc=$? $((SECONDS-t0))s"
DECODER_SHELL_CUDA_DEFINES=SINKHORN_DIV_SHORT=1 timeout 120 python3 tools/bench_replay.py $B > $S/short.log 2>&1; echo "short rc=$? $((SECONDS-t0))s"
echo "== sinkhorn bench (default, short)"; grep "| piece\|sinkhorn_lane whole\|^| exact" $S/sk-default.log $S/sk-short.log
for f in old new probe short; do echo "== $f"; grep "persistent-cluster\|mismatching elements (shell persistent" $S/$f.log | tail -2; done
