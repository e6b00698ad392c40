# call G (thirty-third session, whichever GPU comes): warp 0, the first past the barrier after the dot products,
# pushes the block's partials to all 16 blocks (CL_PUSH_W0=1; the default, warp w to block w, lands the other warps'
# pushes ~0.1 us after warp 0's, and the step's loop runs through the slowest receiver): exactness (random cycles,
# the FMA build, the watchdog) and the profile with the exchange by block at M=2 / 8, then TP4 M=1/2/4/8 in two
# rounds alternating with the default (bench logs appended to one file). It ran with CL_PUSH_W0=1 when the define
# was a switch for every build; it is now a mask of row counts, so today that build is CL_PUSH_W0=15, and the
# default (4) is the four-row build of it.
S=$OUT/eG; mkdir -p $S
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
[ -d /tmp/site/blake3 ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
DECODER_SHELL_CUDA_DEFINES="CL_PUSH_W0=1" timeout 120 python3 tools/cluster_check.py --cases 1 --seed 334 --profile-rows 2 8 > $S/check-w0.log 2>&1; echo "check w0 rc=$? $((SECONDS-t0))s"
for k in 1 2; do for v in def w0; do
  d=""; [ $v = w0 ] && d="CL_PUSH_W0=1"
  [ $((SECONDS-t0)) -gt ${CAP:-300} ] && break 2
  echo "=== tp4 $v $k" >> $S/bench.log
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "tp4 $v $k rc=$? $((SECONDS-t0))s"
done; done
grep "^| random\|^| FMA\|^| watchdog\|^| TP4 M=[28] |\|exchange by block" $S/check-w0.log | cut -c1-330
grep "^=== \|| shell baseline\|| shell persistent-cluster\|mismatching elements (shell persistent" $S/bench.log | cut -c1-110
