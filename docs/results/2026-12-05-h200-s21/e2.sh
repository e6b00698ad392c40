# call 2: f2bf2 in the stream values of every build (CL_SV_PAIRS=1) against the default, builds of at least 4 rows
# (CL_SV_PAIRS=4): call 1 had pairs ahead at M=8 (0.901 / 0.900 against 0.925 / 0.911 ms) and behind at M=1 (0.459 /
# 0.473 against 0.441 / 0.440). At M=1/2 the two differ (pairs or not); at M=4/8 they are the same build (the
# bench's own spread). Four rounds alternating at TP4 M=1/2/4/8, then TP1 M=1/2/8 and stamp profiles at TP4 M=1/2/8
S=/tmp/e2; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for k in 1 2 3 4; do for v in all default; do
  def=""; [ $v = all ] && def="CL_SV_PAIRS=1"
  DECODER_SHELL_CUDA_DEFINES="$def" timeout 90 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$v-$k.log 2>&1; echo "bench $v $k rc=$? $((SECONDS-t0))s"
done; done
for v in all default; do
  def=""; [ $v = all ] && def="CL_SV_PAIRS=1"
  DECODER_SHELL_CUDA_DEFINES="$def" timeout 60 python3 tools/bench_replay.py --tp 1 --rows 1 2 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp1-$v.log 2>&1; echo "tp1 $v rc=$? $((SECONDS-t0))s"
  DECODER_SHELL_CUDA_DEFINES="$def" timeout 80 python3 tools/cluster_check.py --cases 0 --profile-rows 1 2 8 > $S/profile-$v.log 2>&1; echo "profile $v rc=$? $((SECONDS-t0))s"
done
timeout 100 python3 tools/cluster_check.py --cases 2 --seed 53 --profile-rows > $S/check.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
tar czf $OUT/e2.tgz -C /tmp e2
for f in $S/tp4-*.log $S/tp1-*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-60) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
for f in $S/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=[128] |" $f | cut -c1-230; done
grep "^| random\|^| FMA\|^| watchdog" $S/check.log | cut -c1-160
