# call A: exactness of the default (graph-timed launch: random cycles, the FMA build, the watchdog) with the prologue
# stamped piece by piece (CL_ENTRY_STAMP=1: barriers, step 0's arguments, first ranks, x folded); TP4 M=1/2/4/8 in
# two rounds alternating with CL_PUSH_FIRST=1 (X's pushes before the helpers' join loads; exactness and profile
# too); the grid-wide persistent cycle's launch graph-timed (its cooperative node) against direct-timed; TP1 M=1/2
# both ways. The peers' first wheels installed for call B.
S=$OUT/eA; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .wA/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
cp .wA/vllm-py.tgz /tmp/vllm-py.tgz
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
echo "pip $((SECONDS-t0))s"
DECODER_SHELL_CUDA_DEFINES="CL_ENTRY_STAMP=1" timeout 170 python3 tools/cluster_check.py --cases 1 --seed 301 --profile-rows 2 8 > $S/check-tp4.log 2>&1; echo "check tp4 rc=$? $((SECONDS-t0))s"
DECODER_SHELL_CUDA_DEFINES="CL_ENTRY_STAMP=1 CL_PUSH_FIRST=1" timeout 150 python3 tools/cluster_check.py --cases 1 --seed 302 --profile-rows 2 > $S/check-pf.log 2>&1; echo "check pf rc=$? $((SECONDS-t0))s"
for k in 1 2; do for v in def pf; do
  d=""; [ $v = pf ] && d="CL_PUSH_FIRST=1"
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$v-$k.log 2>&1; echo "tp4 $v $k rc=$? $((SECONDS-t0))s"
done; done
for v in graph direct; do
  DECODER_SHELL_CUDA_PERSIST_TIMING=$v timeout 90 python3 tools/bench_replay.py --rows 2 --epochs 30 --only-main --no-torch --persistent > $S/pers-$v.log 2>&1; echo "pers $v rc=$? $((SECONDS-t0))s"
done
for v in def pf; do
  d=""; [ $v = pf ] && d="CL_PUSH_FIRST=1"
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 40 python3 tools/bench_replay.py --tp 1 --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp1-$v.log 2>&1; echo "tp1 $v rc=$? $((SECONDS-t0))s"
done
grep "^| random\|^| FMA\|^| watchdog" $S/check-tp4.log $S/check-pf.log | cut -c1-140
grep "^| TP4 M=[0-9] |\|launch |" $S/check-tp4.log $S/check-pf.log | cut -c1-420
for f in $S/tp*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
for f in $S/pers*.log; do echo "$(basename $f)"; grep "| shell persistent\|mismatching elements (shell persistent" $f | cut -c1-120; done
