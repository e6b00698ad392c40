# call 7: does the polling of the join's words slow the stores and loads it waits for? The fold pausing 100 or
# 300 ns before it reads again the words not yet current (CL_LL_BACKOFF; off by default): stamp profile at TP4
# M=2/8 each, and the cycle at TP4 M=2/4/8 alternating, two rounds
S=$OUT/e7; mkdir -p $S /tmp/e7
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e7/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for v in default CL_LL_BACKOFF=100 CL_LL_BACKOFF=300; do
  d="$v"; [ "$v" = default ] && d=""
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 90 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > /tmp/e7/profile-$v.log 2>&1; echo "$v rc=$? $((SECONDS-t0))s"
done
for k in 1 2; do
  for v in default CL_LL_BACKOFF=100 CL_LL_BACKOFF=300; do
    d="$v"; [ "$v" = default ] && d=""
    DECODER_SHELL_CUDA_DEFINES="$d" timeout 80 python3 tools/bench_replay.py --rows 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > /tmp/e7/tp4-$v-$k.log 2>&1
  done
  echo "round $k $((SECONDS-t0))s"
done
tar czf $S/logs.tgz -C /tmp e7
for f in /tmp/e7/tp4-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
for f in /tmp/e7/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=[28] |" $f | cut -c1-560; done
