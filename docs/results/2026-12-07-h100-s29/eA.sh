# call A: the cluster cycle's launch timed by events that are nodes of a one-kernel graph (graph: as the graph path's
# are) against events around a direct launch (direct: the host's launch call inside); the prologue measured
# (CL_ENTRY_STAMP=1); exactness through the graph-timed launch (random cycles, the FMA build, the watchdog), also of
# pro (CL_PRO_EARLY=1: step 0's arguments and weight copy before the launch's first barriers); TP4 M=1/2/4/8 benches
# alternating graph / direct / pro, TP1 M=1/2 graph then direct. The peers' first wheels installed for call B.
S=$OUT/eA; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .wA/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
cp .wA/vllm-py.tgz /tmp/vllm-py.tgz
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
echo "pip $((SECONDS-t0))s"
DECODER_SHELL_CUDA_PERSIST_TIMING=graph DECODER_SHELL_CUDA_DEFINES="CL_ENTRY_STAMP=1" timeout 150 python3 tools/cluster_check.py --cases 1 --seed 291 --profile-rows 2 8 > $S/check-tp4.log 2>&1; echo "check tp4 rc=$? $((SECONDS-t0))s"
DECODER_SHELL_CUDA_PERSIST_TIMING=graph DECODER_SHELL_CUDA_DEFINES="CL_ENTRY_STAMP=1 CL_PRO_EARLY=1" timeout 100 python3 tools/cluster_check.py --cases 1 --seed 292 --profile-rows 2 > $S/check-pro.log 2>&1; echo "check pro rc=$? $((SECONDS-t0))s"
for k in 1 2; do for v in graph direct pro tp1; do
  d=""; [ $v = pro ] && d="CL_PRO_EARLY=1"; m=$v; [ $v = pro ] && m=graph
  if [ $v = tp1 ]; then
    [ $k = 1 ] && DECODER_SHELL_CUDA_PERSIST_TIMING=graph timeout 40 python3 tools/bench_replay.py --tp 1 --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp1-graph.log 2>&1
    [ $k = 2 ] && DECODER_SHELL_CUDA_PERSIST_TIMING=direct timeout 40 python3 tools/bench_replay.py --tp 1 --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp1-direct.log 2>&1
  else
    DECODER_SHELL_CUDA_DEFINES="$d" DECODER_SHELL_CUDA_PERSIST_TIMING=$m timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$v-$k.log 2>&1
  fi
  echo "$v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt ${CAP:-150} ] && break 2
done; done
grep "^| random\|^| FMA\|^| watchdog" $S/check-tp4.log $S/check-pro.log | cut -c1-140
grep "^| TP4 M=[0-9] |\|launch |" $S/check-tp4.log $S/check-pro.log | cut -c1-330
for f in $S/tp*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
