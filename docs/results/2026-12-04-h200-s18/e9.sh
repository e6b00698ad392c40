# call 9: where the packed words' fold loses its time: the stamp profile at TP4 M=2 of CL_LL_PACK3=1 with and
# without CL_LL_NOWAIT (the fold of whatever the first loads found: inexact) against the 32-bit words with it
S=$OUT/e9; mkdir -p $S /tmp/e9
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e9/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for v in "CL_LL_PACK3=1" "CL_LL_PACK3=1 CL_LL_NOWAIT" "CL_LL_NOWAIT"; do
  n=$(echo $v | tr ' =' '_-')
  DECODER_SHELL_CUDA_DEFINES="$v" timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 2 > /tmp/e9/profile-$n.log 2>&1; echo "$n rc=$? $((SECONDS-t0))s"
done
tar czf $S/logs.tgz -C /tmp e9
for f in /tmp/e9/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=2 |\|^| TP4 M=2 every" $f | cut -c1-470; done
