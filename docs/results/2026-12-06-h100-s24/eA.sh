# call A (the peers' wheels did not fit beside it; call B, the peers, was not run): the default build's exactness (random cycles, FMA build, watchdog), the dsv4-flash TP4 draft + verify replay
# through both cycles (graph, cluster) with changed epochs, and the floor table: stamp profiles at TP4 M=1/2/4/8
# (step, synchronization-only grid, HBM time of the weights);
# last, three rounds alternating at TP4 M=1/2/4: fc69b93 (.ab/fc) against this tree, whose one- and two-row builds are
# 97c92ee's SASS again (fc69b93's wrote the slots' arithmetic generally and declared four weight mbarriers) and whose
# four- and eight-row builds are fc69b93's (M=4 a control)
S=/tmp/eA; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
echo "pip $((SECONDS-t0))s"
timeout 150 python3 tools/cluster_check.py --cases 3 --seed 73 > $S/check.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
python3 -m decoder_shell.cli synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 --out /tmp/f4 > $S/synth.log 2>&1
for c in persistent-cluster graph; do
  timeout 120 python3 -m decoder_shell.cli replay /tmp/f4 --driver cuda --placement emulated --epochs 70 --changed 16 --cycle $c > $S/dv-$c.log 2>&1; echo "dv $c rc=$? $((SECONDS-t0))s"
done
timeout 90 python3 tools/cluster_check.py --cases 0 --profile-rows 1 2 4 8 > $S/profile-tp4.log 2>&1; echo "profile tp4 rc=$? $((SECONDS-t0))s"
for k in 1 2 3; do for v in fc new; do
  d=.; [ $v = fc ] && d=.ab/fc
  (cd $d && timeout 80 python3 tools/bench_replay.py --rows 1 2 4 --epochs 30 --only-main --no-torch --persistent-cluster) > $S/ab-$v-$k.log 2>&1; echo "bench $v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt 560 ] && break 2
done; done
tar czf $OUT/eA.tgz -C /tmp eA
grep "^| random\|^| FMA\|^| watchdog" $S/check.log | cut -c1-200
for c in persistent-cluster graph; do echo "$c: $(grep 'slowest rank' $S/dv-$c.log | tail -1) $(tail -1 $S/dv-$c.log | cut -c1-100)"; done
grep "^| TP[14] M=[0-9] |" $S/profile-tp*.log | cut -c1-300
for f in $S/ab-*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
