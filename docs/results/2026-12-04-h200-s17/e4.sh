# call 4: the GPU tests on the tree as it lands (the short quotient's device check among them), and TP1 M=2 / TP4
# M=1/2/4/8 against the tree before this session (642561d) again, alternating; logs tarred (8 files a call)
S=$OUT/e4; mkdir -p $S /tmp/e4
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e4/pip.log 2>&1 || { echo pip failed; tail /tmp/e4/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p /tmp/old && tar xzf .ab/t-642561d.tgz -C /tmp/old
timeout 300 python3 -m pytest -q -rs tests/test_cuda.py > $S/test_cuda.log 2>&1; echo "test_cuda rc=$? $((SECONDS-t0))s"; tail -2 $S/test_cuda.log
B1="--tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster"
B4="--rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster"
for k in 1 2 3; do
  timeout 60 python3 tools/bench_replay.py $B1 > /tmp/e4/tp1-new$k.log 2>&1
  (cd /tmp/old && timeout 60 python3 tools/bench_replay.py $B1 > /tmp/e4/tp1-old$k.log 2>&1)
done; echo "tp1 $((SECONDS-t0))s"
timeout 100 python3 tools/bench_replay.py $B4 > /tmp/e4/tp4-new.log 2>&1
(cd /tmp/old && timeout 100 python3 tools/bench_replay.py $B4 > /tmp/e4/tp4-old.log 2>&1); echo "tp4 $((SECONDS-t0))s"
tar czf $S/logs.tgz -C /tmp e4
for f in /tmp/e4/tp1-*.log /tmp/e4/tp4-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
grep "| shell baseline" /tmp/e4/tp4-new.log | tail -1
