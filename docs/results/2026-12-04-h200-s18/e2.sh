# call 2: is A bound by its count of shared-memory loads? Timing ablations (inexact: the right loads' count and
# width, the wrong elements): the weights (ABL_W4) and / or the stream values (ABL_SV4) by 16-byte loads, four u a
# load, conflict-free; the stamp profile at TP4 M=2 and the cycle at TP4 M=1/2/8 and TP1 M=2 for each
S=$OUT/e2; mkdir -p $S /tmp/e2
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e2/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
B4="--rows 1 2 8 --epochs 30 --only-main --no-torch --persistent-cluster"
B1="--tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster"
for v in default ABL_W4 ABL_SV4 "ABL_W4 ABL_SV4"; do
  n=$(echo $v | tr ' ' '_'); d=$v; [ "$v" = default ] && d=""
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 100 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > /tmp/e2/profile-$n.log 2>&1
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 80 python3 tools/bench_replay.py $B4 > /tmp/e2/tp4-$n.log 2>&1
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py $B1 > /tmp/e2/tp1-$n.log 2>&1
  echo "$n $((SECONDS-t0))s"
done
tar czf $S/logs.tgz -C /tmp e2
for f in /tmp/e2/tp4-*.log /tmp/e2/tp1-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1)"; done
for f in /tmp/e2/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=[28] |" $f | cut -c1-330; done
