# call 8: is C's first pass (0.83 us at TP4 M=2, 0.35 warm) thread 0's request of the next weights at the step's
# start (0.22 us)? Stamp profile at TP4 M=2/8 of the default, of no copy after the first step (CL_NO_FETCH, inexact)
# and of the request after thread 0's stream values (CL_FETCH_AFTER_C, exact); that one's random cycles and the cycle
# at TP4 M=1/2/4/8 against the default, one round each
S=$OUT/e8; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for v in default CL_NO_FETCH CL_FETCH_AFTER_C; do
  d="$v"; [ "$v" = default ] && d=""
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > $S/profile-$v.log 2>&1; echo "$v rc=$? $((SECONDS-t0))s"
done
for v in default CL_FETCH_AFTER_C; do
  d="$v"; [ "$v" = default ] && d=""
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$v.log 2>&1; echo "bench $v $((SECONDS-t0))s"
done
DECODER_SHELL_CUDA_DEFINES="CL_FETCH_AFTER_C" timeout 60 python3 tools/cluster_check.py --cases 2 --seed 31 --profile-rows > $S/check-after-c.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
for f in $S/tp4-*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
grep "^| random\|^| FMA\|^| watchdog" $S/check-after-c.log | cut -c1-200
for f in $S/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=[28] |" $f | cut -c1-300; grep "^| TP4 M=[28] warps" $f | cut -c1-200; done
