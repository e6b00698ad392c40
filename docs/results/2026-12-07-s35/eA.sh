# call A (thirty-fifth session's plan; not run in that session, which was lent no device): the default build of
# CL_B_HALF (B's roles on warps 0-7 in the two-row build of more than two ranks) on an H200, with the checks that did
# not run after it was made the default (a random cycle, the FMA build caught, the watchdog) and its profile at
# TP4 M=2; then B's L2 prefetches put back in that build, by the last helper thread at the rank's barrier
# (CL_PF_B_BH=1) or by the block's last thread, idle in B, at B's start (CL_PF_B_BH=2), against the default (none)
# and CL_B_HALF=0 (the build before), in three alternating bench rounds of TP4 M=1/2 (M=1 is the same cubin in all
# four: a check of the rounds' drift). On another GPU it runs too (its name is in gpu.txt): compare within the call.
S=$OUT/eA; mkdir -p $S
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 120 python3 tools/cluster_check.py --cases 1 --seed 351 --profile-rows 2 > $S/check-default.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
for d in CL_PF_B_BH=1 CL_PF_B_BH=2; do
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/cluster_check.py --cases 1 --seed 352 --profile-rows 2 > "$S/check-${d//=/_}.log" 2>&1; echo "$d rc=$? $((SECONDS-t0))s"
done
for k in 1 2 3; do for d in "" CL_PF_B_BH=1 CL_PF_B_BH=2 CL_B_HALF=0; do
  echo "=== $k ${d:-default}" >> $S/bench.log
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 45 python3 tools/bench_replay.py --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "bench $k ${d:-default} rc=$? $((SECONDS-t0))s"
done; done
for f in $S/check-*.log; do echo "== $f"; grep "^| random\|^| FMA\|^| watchdog\|^| TP4 M=2 |" $f | cut -c1-330; done
grep "^=== \|| shell persistent-cluster\|mismatching elements (shell persistent" $S/bench.log | cut -c1-100
