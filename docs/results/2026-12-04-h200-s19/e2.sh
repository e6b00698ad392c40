# call 2: the join's fold with the ring's fields in registers and selects (HEAD) against the build before it
# (.ab/base: the tree at the commit before, in the same call): random cycles bit for bit (FMA build caught,
# watchdog) and the stamp profile at TP4 M=2/8; the cycle at TP4 M=1/2/4/8 and TP1 M=2 alternating, two rounds;
# TP2 M=2/8; the draft + verify replay
S=$OUT/e2; mkdir -p $S /tmp/e2
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e2/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 200 python3 tools/cluster_check.py --cases 6 --seed 19 --profile-rows 2 8 --json /tmp/e2/check.json > /tmp/e2/check.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
B4="--rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster"
B1="--tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster"
B2="--tp 2 --rows 2 8 --epochs 30 --only-main --no-torch --persistent-cluster"
for k in 1 2; do
  for v in base new; do
    T=tools; [ $v = base ] && T=.ab/base/tools
    timeout 100 python3 $T/bench_replay.py $B4 > /tmp/e2/tp4-$v-$k.log 2>&1
    timeout 60 python3 $T/bench_replay.py $B1 > /tmp/e2/tp1-$v-$k.log 2>&1
    echo "round $k $v $((SECONDS-t0))s"
  done
done
for v in base new; do T=tools; [ $v = base ] && T=.ab/base/tools; timeout 80 python3 $T/bench_replay.py $B2 > /tmp/e2/tp2-$v.log 2>&1; done; echo "tp2 $((SECONDS-t0))s"
python3 -m decoder_shell.cli synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 --out /tmp/f4 > /tmp/e2/synth.log 2>&1
timeout 100 python3 -m decoder_shell.cli replay /tmp/f4 --driver cuda --placement emulated --epochs 70 --changed 16 --cycle persistent-cluster > /tmp/e2/dv.log 2>&1; echo "dv rc=$? $((SECONDS-t0))s"
tar czf $S/logs.tgz -C /tmp e2 --exclude=check.json
cp /tmp/e2/check.json $S/
for f in /tmp/e2/tp4-*.log /tmp/e2/tp1-*.log /tmp/e2/tp2-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
grep "slowest rank\|EXACT\|MISMATCH\|exact" /tmp/e2/dv.log | head -5
grep "^| random\|^| FMA\|^| watchdog\|^| TP4 M=[28] |" /tmp/e2/check.log | cut -c1-600
