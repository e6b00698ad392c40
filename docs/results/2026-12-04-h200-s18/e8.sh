# call 8: the packed words spread over a rank's region as the 32-bit ones are (word k of a block at half its first
# element's index; in call 7 a block's words were contiguous and the cycle slower, blocks 1.4 us apart): random
# cycles bit for bit, the stamp profile at TP4 M=2/8, the cycle at TP4 M=1/2/4/8 against CL_LL_PACK3=0
S=$OUT/e8; mkdir -p $S /tmp/e8
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e8/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 150 python3 tools/cluster_check.py --cases 2 --seed 11 --profile-rows 2 8 > /tmp/e8/check.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
B4="--rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster"
for v in 1 0 1; do
  DECODER_SHELL_CUDA_DEFINES="CL_LL_PACK3=$v" timeout 100 python3 tools/bench_replay.py $B4 > /tmp/e8/tp4-$v-$SECONDS.log 2>&1; echo "pack$v $((SECONDS-t0))s"
done
tar czf $S/logs.tgz -C /tmp e8
for f in /tmp/e8/tp4-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
grep "^| random\|^| FMA\|^| watchdog\|^| TP4 M=[28] |\|^| TP4 M=[28] every" /tmp/e8/check.log | cut -c1-520
