# call 5: the dot products' weights read straight from global memory (L2: the step's weights are prefetched there
# CL_LOOKAHEAD steps ahead) into registers, no tensor-map copy through shared memory (CL_W_LDG, exact: the same
# values in the same order), against the default; stamp profile at TP4 M=2/8, the cycle at TP4 M=1/2/4/8 and TP1
# M=2 alternating, two rounds; the random cycles checked bit for bit
S=$OUT/e5; mkdir -p $S /tmp/e5
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e5/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
B4="--rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster"
B1="--tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster"
DECODER_SHELL_CUDA_DEFINES="CL_W_LDG" timeout 150 python3 tools/cluster_check.py --cases 2 --seed 9 --profile-rows 2 8 > /tmp/e5/check-ldg.log 2>&1; echo "check ldg rc=$? $((SECONDS-t0))s"
timeout 100 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > /tmp/e5/profile-default.log 2>&1; echo "profile default rc=$? $((SECONDS-t0))s"
for k in 1 2; do
  for v in default CL_W_LDG; do
    d=$v; [ $v = default ] && d=""
    DECODER_SHELL_CUDA_DEFINES="$d" timeout 100 python3 tools/bench_replay.py $B4 > /tmp/e5/tp4-$v-$k.log 2>&1
    DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py $B1 > /tmp/e5/tp1-$v-$k.log 2>&1
    echo "round $k $v $((SECONDS-t0))s"
  done
done
tar czf $S/logs.tgz -C /tmp e5
for f in /tmp/e5/tp4-*.log /tmp/e5/tp1-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
for f in /tmp/e5/check-ldg.log /tmp/e5/profile-default.log; do echo "== $(basename $f)"; grep "^| random\|^| FMA\|^| TP4 M=[28] |" $f | cut -c1-400; done
