# call 3: the M=1/2 builds are the same code as HEAD's (SASS: the same 9152 instructions at two rows, registers
# renamed, two more mbarrier inits), yet call 2 read M=2 0.508 against 0.492: five more rounds alternating, TP4
# M=1/2/4, to tell a real cost from the run-to-run spread
S=/tmp/e3; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
for k in 1 2 3 4 5; do for v in head new; do
  d=.; [ $v = head ] && d=.ab/head
  (cd $d && timeout 80 python3 tools/bench_replay.py --rows 1 2 4 --epochs 30 --only-main --no-torch --persistent-cluster) > $S/tp4-$v-$k.log 2>&1; echo "bench $v $k rc=$? $((SECONDS-t0))s"
done; done
tar czf $OUT/e3.tgz -C /tmp e3
for f in $S/tp*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-60) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
