# call 3: the short quotient as the default: the graph path's variant sweep and random cases, the cluster cycle's
# random cycles (FMA build caught, watchdog), TP1 M=2 and TP4 M=1/2/4/8 against the tree before this session
# (642561d) in the same call, and the draft + verify replay
S=$OUT/e3; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p /tmp/old && tar xzf .ab/t-642561d.tgz -C /tmp/old
DECODER_SHELL_DEADLINE_S=30 timeout 200 python3 tools/cuda_check.py --cases 2 --seed 6 --json $S/check.json > $S/check.log 2> $S/check.err; echo "cuda_check rc=$? $((SECONDS-t0))s"
timeout 120 python3 tools/cluster_check.py --cases 2 --seed 6 --profile-rows 2 --json $S/cluster.json > $S/cluster.log 2>&1; echo "cluster_check rc=$? $((SECONDS-t0))s"
B1="--tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster"
for k in 1 2 3; do
  (cd /tmp/old && timeout 60 python3 tools/bench_replay.py $B1 > $S/tp1-old$k.log 2>&1)
  timeout 60 python3 tools/bench_replay.py $B1 > $S/tp1-new$k.log 2>&1
done; echo "tp1 $((SECONDS-t0))s"
B4="--rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster"
(cd /tmp/old && timeout 100 python3 tools/bench_replay.py $B4 > $S/tp4-old.log 2>&1)
timeout 100 python3 tools/bench_replay.py $B4 > $S/tp4-new.log 2>&1; echo "tp4 $((SECONDS-t0))s"
python3 -m decoder_shell.cli synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 --out /tmp/f4 > $S/synth.log 2>&1
for c in persistent-cluster graph; do
  timeout 100 python3 -m decoder_shell.cli replay /tmp/f4 --driver cuda --placement emulated --epochs 70 --changed 16 --cycle $c > $S/dv-$c.log 2>&1; echo "dv $c rc=$? $((SECONDS-t0))s"
done
grep "^|" $S/check.log | tail -4; grep "^|" $S/cluster.log | head -6
for f in $S/tp1-*.log $S/tp4-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
for c in persistent-cluster graph; do grep "slowest rank\|EXACT\|MISMATCH" $S/dv-$c.log; done
