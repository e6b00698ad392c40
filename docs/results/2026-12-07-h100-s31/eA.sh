# call A (thirty-first session): CL_PRO_LOADS=1 (the prologue's global loads issued before its first barrier:
# step 0's header, order offset and the L2 prefetch's addresses beside its arguments) against the default: exactness
# (random cycles, the FMA build, the watchdog) and the prologue piece by piece (CL_ENTRY_STAMP=1) for both, then TP4
# M=1/2/4/8 in three rounds alternating, TP1 M=1/2 both ways. Bench logs appended to one file (the file count).
# The peers' first wheels (.wA) installed under /tmp for call B.
S=$OUT/eA; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .wA/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
cp .wA/vllm-py.tgz /tmp/vllm-py.tgz
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
DECODER_SHELL_CUDA_DEFINES="CL_ENTRY_STAMP=1 CL_PRO_LOADS=1" timeout 120 python3 tools/cluster_check.py --cases 1 --seed 303 --profile-rows 2 8 > $S/check-pl.log 2>&1; echo "check pl rc=$? $((SECONDS-t0))s"
DECODER_SHELL_CUDA_DEFINES="CL_ENTRY_STAMP=1" timeout 100 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > $S/check-def.log 2>&1; echo "check def rc=$? $((SECONDS-t0))s"
for k in 1 2 3; do for v in def pl; do
  d=""; [ $v = pl ] && d="CL_PRO_LOADS=1"
  echo "=== tp4 $v $k" >> $S/bench.log
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "tp4 $v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt ${CAP:-240} ] && break 2
done; done
for v in def pl; do
  d=""; [ $v = pl ] && d="CL_PRO_LOADS=1"
  echo "=== tp1 $v" >> $S/bench.log
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 40 python3 tools/bench_replay.py --tp 1 --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "tp1 $v rc=$? $((SECONDS-t0))s"
done
grep "^| random\|^| FMA\|^| watchdog" $S/check-pl.log | cut -c1-140
grep "launch |" $S/check-pl.log $S/check-def.log | cut -c1-420
grep "^=== \|| shell baseline\|| shell persistent-cluster\|mismatching elements (shell persistent" $S/bench.log | cut -c1-110
