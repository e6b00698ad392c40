# call F (asked for nvidia-h200): the default build at TP4 M=1/2/4/8 and TP1 M=1/2, two rounds, on whatever card came
S=/tmp/eF; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
for k in 1 2; do
  timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$k.log 2>&1; echo "tp4 $k rc=$? $((SECONDS-t0))s"
  timeout 40 python3 tools/bench_replay.py --tp 1 --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp1-$k.log 2>&1; echo "tp1 $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt 120 ] && break
done
tar czf $OUT/eF.tgz -C /tmp eF
for f in $S/tp*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-60) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-70)"; done
