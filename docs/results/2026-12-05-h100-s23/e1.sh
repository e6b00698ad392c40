# call 1: the weights of builds past two rows in three box slots (CL_WSPARE, default 1): the next step's first box
# copied at the step's start, only the second after the dot products (one buffer before: the whole copy in B).
# Exactness: random cycles (every built hidden size, 1-8 rows) + FMA build + watchdog, the dsv4-flash TP4 draft +
# verify replay with changed epochs; then TP4 M=1/2/4/8 against HEAD before it (.ab/head) and, for the twenty-first
# session's open question, the new tree with f2bf2 in every build (CL_SV_PAIRS=1), three rounds alternating;
# stamp profiles at M=2/8 of head and new
S=/tmp/e1; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 180 python3 tools/cluster_check.py --cases 6 --seed 59 --profile-rows > $S/check.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
python3 -m decoder_shell.cli synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 --out /tmp/f4 > $S/synth.log 2>&1
timeout 150 python3 -m decoder_shell.cli replay /tmp/f4 --driver cuda --placement emulated --epochs 70 --changed 16 --cycle persistent-cluster > $S/dv.log 2>&1; echo "dv rc=$? $((SECONDS-t0))s"
for k in 1 2 3; do for v in head new sv1; do
  d=.; def=""; [ $v = head ] && d=.ab/head; [ $v = sv1 ] && def="CL_SV_PAIRS=1"
  (cd $d && DECODER_SHELL_CUDA_DEFINES="$def" timeout 90 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster) > $S/tp4-$v-$k.log 2>&1; echo "bench $v $k rc=$? $((SECONDS-t0))s"
done; done
for v in head new; do
  d=.; [ $v = head ] && d=.ab/head
  (cd $d && timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8) > $S/profile-$v.log 2>&1; echo "profile $v rc=$? $((SECONDS-t0))s"
done
tar czf $OUT/e1.tgz -C /tmp e1
grep "^| random\|^| FMA\|^| watchdog" $S/check.log | cut -c1-200; tail -2 $S/dv.log | cut -c1-300
for f in $S/tp4-*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-60) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
for f in $S/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=[28] |" $f | cut -c1-330; done
