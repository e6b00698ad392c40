# call 2 (thirty-sixth session's plan; not run in that session, whose device time was spent on tries that found no
# machine): at four ranks, B's two L2 prefetches timed apart. The default issues both (the partial sum two steps
# ahead, the weights three ahead); CL_PF_B_ONLY=1 keeps the partials' alone, =2 the weights' alone, CL_NO_PF_B
# neither (measured slower at TP4 M=4/8 in the thirty-fifth session). The checks of both new builds (a random
# cycle, the FMA build caught), then two alternating bench rounds of TP4 M=1/2/4/8 (M=2 is the same cubin in all
# four builds: its two-row build at four ranks issues no prefetch in B, so it shows the rounds' drift).
S=$OUT/e2; mkdir -p $S
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for d in CL_PF_B_ONLY=1 CL_PF_B_ONLY=2; do
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 100 python3 tools/cluster_check.py --cases 1 --seed 362 --profile-rows 4 > "$S/check-${d//=/_}.log" 2>&1; echo "check $d rc=$? $((SECONDS-t0))s"
done
for k in 1 2; do for d in "" CL_PF_B_ONLY=1 CL_PF_B_ONLY=2 CL_NO_PF_B; do
  echo "=== $k ${d:-default}" >> $S/bench.log
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "bench $k ${d:-default} rc=$? $((SECONDS-t0))s"
done; done
for f in $S/check-*.log; do echo "== $f"; grep "^| random\|^| FMA\|^| watchdog\|^| TP4 M=4 |" $f | cut -c1-330; done
grep "^=== \|| shell persistent-cluster\|mismatching elements (shell persistent" $S/bench.log | cut -c1-100
