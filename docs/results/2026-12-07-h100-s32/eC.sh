# call C (thirty-second session, a later start, for an H200 only: on another GPU it stops at once): the default build
# (CL_SV_LANE2=4) on an H200, graph-timed, which no session has measured yet (issue 15's targets are the H200's):
# exactness (random cycles, the FMA build, the watchdog) and the profile at M=2 / 8,
# then TP4 M=1/2/4/8 in three rounds and TP1 M=1/2 (bench logs appended to one file). The peers' first wheels (.wA)
# installed under /tmp for call D (eD.sh) on the same machine.
S=$OUT/eC; mkdir -p $S
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
grep -q H200 $S/gpu.txt || { echo "not an H200: stopped"; exit 0; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .wA/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
cp .wA/vllm-py.tgz /tmp/vllm-py.tgz
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 120 python3 tools/cluster_check.py --cases 1 --seed 322 --profile-rows 2 8 > $S/check.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
for k in 1 2 3; do
  echo "=== tp4 $k" >> $S/bench.log
  timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "tp4 $k rc=$? $((SECONDS-t0))s"
done
echo "=== tp1" >> $S/bench.log
timeout 40 python3 tools/bench_replay.py --tp 1 --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "tp1 rc=$? $((SECONDS-t0))s"
grep "^| random\|^| FMA\|^| watchdog\|^| TP4 M=[0-9] |" $S/check.log | cut -c1-330
grep "^=== \|| shell baseline\|| shell persistent-cluster\|mismatching elements (shell persistent" $S/bench.log | cut -c1-110
