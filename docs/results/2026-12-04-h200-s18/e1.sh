# call 1: the dot products' loop at one and two rows unrolled by 16 (all of it, the default), 8, 4 and 2
# (CL_LANES_UNROLL2): the hot code a scheduler runs in A is ~1,200 SASS instructions fully unrolled (two
# variants, ~19 KiB) against ~140 at 4; TP4 M=1/2 and TP1 M=2, two rounds alternating, and the stamp profile
S=$OUT/e1; mkdir -p $S /tmp/e1
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e1/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
B4="--rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster"
B1="--tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster"
for k in 1 2; do
  for u in 16 8 4 2; do
    DECODER_SHELL_CUDA_DEFINES="CL_LANES_UNROLL2=$u" timeout 80 python3 tools/bench_replay.py $B4 > /tmp/e1/tp4-u$u-$k.log 2>&1
    DECODER_SHELL_CUDA_DEFINES="CL_LANES_UNROLL2=$u" timeout 60 python3 tools/bench_replay.py $B1 > /tmp/e1/tp1-u$u-$k.log 2>&1
    echo "round $k u$u $((SECONDS-t0))s"
  done
done
for u in 16 4; do
  DECODER_SHELL_CUDA_DEFINES="CL_LANES_UNROLL2=$u" timeout 100 python3 tools/cluster_check.py --cases 0 --profile-rows 2 > /tmp/e1/profile-u$u.log 2>&1; echo "profile u$u rc=$? $((SECONDS-t0))s"
done
tar czf $S/logs.tgz -C /tmp e1
for f in /tmp/e1/tp4-*.log /tmp/e1/tp1-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -2 | tr '\n' ' ') $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
for u in 16 4; do grep "^| TP4 M=2 |" /tmp/e1/profile-u$u.log | cut -c1-400; done
