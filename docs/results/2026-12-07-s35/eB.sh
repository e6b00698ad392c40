# call B (thirty-fifth session, after call A and call A2's bench of CL_NO_PF_B on its H100, README.md): B's L2
# prefetches off in the builds of one and two ranks and one and two rows (CL_PF_B_OFF_ROWS=3, the default now; those
# cubins are CL_NO_PF_B's byte for byte) against on everywhere (CL_PF_B_OFF_ROWS=0, the build before) and off
# everywhere (CL_NO_PF_B: at four and eight rows, whether the mask should take them too): random cycles of 1-8 ranks,
# the FMA build, the watchdog; then two alternating bench rounds of TP2 and TP1 M=1/2/4/8 (every element checked).
S=$OUT/eB; mkdir -p $S
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 150 python3 tools/cluster_check.py --cases 3 --seed 354 --profile-rows 2 --tp 2 > $S/check.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
for k in 1 2; do for d in "" CL_PF_B_OFF_ROWS=0 CL_NO_PF_B; do for tp in 2 1; do
  echo "=== $k ${d:-default} tp$tp" >> $S/bench.log
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 50 python3 tools/bench_replay.py --tp $tp --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "bench $k ${d:-default} tp$tp rc=$? $((SECONDS-t0))s"
done; done; done
grep "^case\|^| random\|^| FMA\|^| watchdog\|^| TP2 M=2 |" $S/check.log | cut -c1-300
grep "^=== \|| shell persistent-cluster\|mismatching elements (shell persistent" $S/bench.log | cut -c1-100
