# call A (thirty-second session): the stream values two lanes a thread (CL_SV_LANE2=1: x, the residual and sv by
# 8-byte loads and stores, the streams' bf16 pairs by 4-byte stores, post/comb loaded once for both lanes; ~18% fewer
# instructions an element in the carried loop's SASS at eight rows) against the default, on whichever GPU comes, and
# the default build graph-timed on an H200 where that is the GPU: exactness of the variant (random cycles, the FMA
# build, the watchdog) and both builds' profiles at M=2 / 8, then TP4 M=1/2/4/8 in three rounds alternating and TP1
# M=1/2 both ways (bench logs appended to one file). The peers' first wheels (.wA) installed under /tmp for call B.
S=$OUT/eA; mkdir -p $S
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .wA/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
cp .wA/vllm-py.tgz /tmp/vllm-py.tgz
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
DECODER_SHELL_CUDA_DEFINES="CL_SV_LANE2=1" timeout 130 python3 tools/cluster_check.py --cases 1 --seed 321 --profile-rows 2 8 > $S/check-l2.log 2>&1; echo "check l2 rc=$? $((SECONDS-t0))s"
timeout 100 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > $S/check-def.log 2>&1; echo "check def rc=$? $((SECONDS-t0))s"
for k in 1 2 3; do for v in def l2; do
  d=""; [ $v = l2 ] && d="CL_SV_LANE2=1"
  echo "=== tp4 $v $k" >> $S/bench.log
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "tp4 $v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt ${CAP:-330} ] && break 2
done; done
for v in def l2; do
  [ $((SECONDS-t0)) -gt 420 ] && break
  d=""; [ $v = l2 ] && d="CL_SV_LANE2=1"
  echo "=== tp1 $v" >> $S/bench.log
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 40 python3 tools/bench_replay.py --tp 1 --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "tp1 $v rc=$? $((SECONDS-t0))s"
done
grep "^| random\|^| FMA\|^| watchdog" $S/check-l2.log | cut -c1-160
grep "^| TP4 M=[0-9] |" $S/check-l2.log $S/check-def.log | cut -c1-330
grep "^=== \|| shell baseline\|| shell persistent-cluster\|mismatching elements (shell persistent" $S/bench.log | cut -c1-110
