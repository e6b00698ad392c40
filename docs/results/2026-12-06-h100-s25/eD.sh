# call D (asked for nvidia-h200; an H100 came): the peers' first wheels installed for a call E (not made: the H100's
# peers ran in call B); the default build's exactness (random cycles, FMA build,
# watchdog) and step profiles at TP4 M=1/2/4/8 and TP1 M=2; two rounds of the bench, TP4 M=1/2/4/8 and TP1 M=2
S=/tmp/eD; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .wA/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
cp .wA/vllm-py.tgz /tmp/vllm-py.tgz
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
timeout 200 python3 tools/cluster_check.py --cases 3 --seed 76 --profile-rows 1 2 4 8 > $S/check.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
timeout 60 python3 tools/cluster_check.py --tp 1 --cases 0 --profile-rows 2 > $S/profile-tp1.log 2>&1; echo "profile tp1 rc=$? $((SECONDS-t0))s"
for k in 1 2; do
  timeout 80 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$k.log 2>&1; echo "bench tp4 $k rc=$? $((SECONDS-t0))s"
  timeout 50 python3 tools/bench_replay.py --tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp1-$k.log 2>&1; echo "bench tp1 $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt 500 ] && break
done
tar czf $OUT/eD.tgz -C /tmp eD
grep "^| random\|^| FMA\|^| watchdog" $S/check.log | cut -c1-160
grep "^| TP[14] M=[0-9] |" $S/check.log $S/profile-tp1.log | cut -c1-330
for f in $S/tp*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
