# call 1: where the fold's time goes after the join (1.25 us at TP4 M=2 even with no waiting, sync-only 0.26):
# stamp profiles at TP4 M=2/8 of timing ablations: no L2 prefetch in B (exact), no all-reduce output store,
# no fold arithmetic, no waiting, and all of them together
S=$OUT/e1; mkdir -p $S /tmp/e1
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e1/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for v in default CL_NO_PF_B CL_NO_AROUT CL_FOLD_NONE CL_LL_NOWAIT "CL_LL_NOWAIT CL_FOLD_NONE CL_NO_AROUT" "CL_LL_NOWAIT CL_FOLD_NONE CL_NO_AROUT CL_NO_PF_B"; do
  n=$(echo $v | tr ' =' '_-'); d="$v"; [ "$v" = default ] && d=""
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 90 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > /tmp/e1/profile-$n.log 2>&1; echo "$n rc=$? $((SECONDS-t0))s"
done
tar czf $S/logs.tgz -C /tmp e1
for f in /tmp/e1/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=[28] |\|^| TP4 M=[28] sync\|^| TP4 M=[28] every" $f | cut -c1-600; done
