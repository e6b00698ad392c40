# (as it ran, at 1370725: CL_B_HALF=1 is today's CL_B_HALF=3, CL_B_HALF=2 today's CL_B_HALF=3 CL_B_LOAD=1; see README.md)
# call C (thirty-fourth session, meant for the machine of calls A and B while warm; it ran on an H100): what a step whose two rows ran half a
# step apart would face, measured before building it. CL_B_HALF=1: B's roles (the Sinkhorn warp, the helpers' y, join
# and fold) on warps 0-7 only, warps 8-15 idle in B; CL_B_HALF=2: the same with warps 8-15 running one row's dot
# products over the step's weights during B (the other row's A beside this row's B); 256 threads a block: one row's
# stream values and dot products on 8 warps. Profiles of TP4 M=1/2 (every build exact by construction: checked by one
# random cycle of CL_B_HALF=2 and the bench's mismatch counts), then two bench rounds of the three 512-thread builds.
S=$OUT/eC; mkdir -p $S
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
DECODER_SHELL_CUDA_DEFINES=CL_B_HALF=2 timeout 90 python3 tools/cluster_check.py --cases 1 --seed 341 --profile-rows 1 2 > $S/check-bh2.log 2>&1; echo "bh2 rc=$? $((SECONDS-t0))s"
for d in "" CL_B_HALF=1; do
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 1 2 > "$S/check-${d:-default}.log" 2>&1; echo "$d rc=$? $((SECONDS-t0))s"
done
DECODER_SHELL_CUDA_CLUSTER_THREADS=256 timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 1 2 > $S/check-t256.log 2>&1; echo "t256 rc=$? $((SECONDS-t0))s"
for k in 1 2; do for d in "" CL_B_HALF=1 CL_B_HALF=2; do
  echo "=== $k ${d:-default}" >> $S/bench.log
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 50 python3 tools/bench_replay.py --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "bench $k $d rc=$? $((SECONDS-t0))s"
done; done
for f in $S/check-*.log; do echo "== $f"; grep "^| random\|^| TP4 M=[12] |" $f | cut -c1-520; done
grep "^=== \|| shell persistent-cluster\|mismatching elements (shell persistent" $S/bench.log | cut -c1-100
