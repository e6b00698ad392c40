# call F (thirty-third session, whichever GPU comes): is a block's late receipt of the exchange (TP4 M=2: blocks 4
# and 5 of every cluster get every partial ~0.19 us after block 0, start each step that much later and are the
# step's last at the dot products) its place or the warp that pushes to it? Warp w pushes to block (w + N) % 16
# (CL_PUSH_ROT=N, a diagnosis) for N = 0, 4, 8, with thread 0's waits stamped (CL_WAIT_STAMP=1); every block's
# raw stamps of one traced launch each (--dump), then the three builds benched in one round.
S=$OUT/eF; mkdir -p $S
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
[ -d /tmp/site/blake3 ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for n in 0 4 8; do
  DECODER_SHELL_CUDA_DEFINES="CL_WAIT_STAMP=1 CL_SM_STAMP=1 CL_PUSH_ROT=$n" timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 2 --dump /tmp/r$n > /tmp/r$n.log 2>&1; echo "rot $n rc=$? $((SECONDS-t0))s"
  cp /tmp/r$n/every-tp4-m2.npz $S/rot$n.npz; grep "^| TP4 M=2 |" /tmp/r$n.log | cut -c1-250
done
for n in 0 4 8; do
  d=""; [ $n != 0 ] && d="CL_PUSH_ROT=$n"
  echo "=== rot $n" >> $S/bench.log
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 50 python3 tools/bench_replay.py --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "bench rot $n rc=$? $((SECONDS-t0))s"
done
grep "^=== \|| shell persistent-cluster\|mismatching elements (shell persistent" $S/bench.log | cut -c1-110
