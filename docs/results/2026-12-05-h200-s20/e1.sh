# call 1: where the step's instructions stall (Nsight Compute, per-SASS stall samples, TP4 M=2 and M=8, the roles
# kept from step to step), and that change (CL_ROLES_CARRIED) against the tree before it (.ab/base, 59b44e0):
# stamp profiles and the cycle at TP4 M=1/2/4/8, two rounds alternating
S=/tmp/e1; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
OUT=$S/ncu ROWS="2 8" timeout 420 bash tools/gpu_cluster_ncu.sh > $S/ncu.log 2>&1; echo "ncu rc=$? $((SECONDS-t0))s"
for v in base new; do
  d=.; [ $v = base ] && d=.ab/base
  (cd $d && timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8) > $S/profile-$v.log 2>&1; echo "profile $v rc=$? $((SECONDS-t0))s"
done
for k in 1 2; do for v in base new; do
  d=.; [ $v = base ] && d=.ab/base
  (cd $d && timeout 90 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster) > $S/tp4-$v-$k.log 2>&1; echo "bench $v $k rc=$? $((SECONDS-t0))s"
done; done
tar czf $OUT/e1.tgz -C /tmp e1
for f in $S/tp4-*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
for f in $S/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=[28] |" $f | cut -c1-330; done
grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy" $S/ncu/m*/details.txt | head -12
