# call 3: the next step's arguments and header loaded a step earlier (CL_NX_AHEAD=1: at step s the words of step
# s + 2, stored after A of step s + 1) against the default (loaded at step s's start, stored after its A: the
# fourteenth session's warp stamps found warp 1, which holds the header and order-offset words, the last at A's
# barrier in 5,293 of 5,440 block-steps); which warp is last where (CL_WARP_STAMPS=1, diagnosis builds), the
# stamp profile, and the cycle at TP4 M=1/2/4/8 and TP1 M=2, alternating, two rounds
S=$OUT/e3; mkdir -p $S /tmp/e3
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e3/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for v in 0 1; do
  DECODER_SHELL_CUDA_DEFINES="CL_NX_AHEAD=$v CL_WARP_STAMPS=1" timeout 100 python3 tools/cluster_check.py --cases 0 --profile-rows 2 > /tmp/e3/warps-$v.log 2>&1
  echo "warps $v rc=$? $((SECONDS-t0))s"
done
B4="--rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster"
B1="--tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster"
for k in 1 2; do
  for v in 0 1; do
    DECODER_SHELL_CUDA_DEFINES="CL_NX_AHEAD=$v" timeout 100 python3 tools/bench_replay.py $B4 > /tmp/e3/tp4-$v-$k.log 2>&1
    DECODER_SHELL_CUDA_DEFINES="CL_NX_AHEAD=$v" timeout 60 python3 tools/bench_replay.py $B1 > /tmp/e3/tp1-$v-$k.log 2>&1
    echo "round $k nx$v $((SECONDS-t0))s"
  done
done
DECODER_SHELL_CUDA_DEFINES="CL_NX_AHEAD=1" timeout 150 python3 tools/cluster_check.py --cases 2 --seed 8 --profile-rows 2 8 > /tmp/e3/check-1.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
tar czf $S/logs.tgz -C /tmp e3
for f in /tmp/e3/tp4-*.log /tmp/e3/tp1-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
for v in 0 1; do echo "== warps $v"; grep "^| TP4 M=2 |\|^| TP4 M=2 warps" /tmp/e3/warps-$v.log | cut -c1-420; done
grep "^|" /tmp/e3/check-1.log | cut -c1-420 | head -12
