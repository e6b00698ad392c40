# call 3: the helpers' fold without loading its own rank's words (CL_LL_OWN=1, the default now) against
# loading them (CL_LL_OWN=0), and the packed bf16 join (CL_LL_PACK3=1) again now that its fold reads the ring from
# registers: random cycles bit for bit and the stamp profile at TP4 M=2/8 for each; the cycle at TP4 M=1/2/4/8 and
# TP1 M=2 alternating, two rounds; the draft + verify replay
S=$OUT/e3; mkdir -p $S /tmp/e3
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e3/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for v in CL_LL_OWN=1 CL_LL_OWN=0 CL_LL_PACK3=1; do
  DECODER_SHELL_CUDA_DEFINES="$v" timeout 150 python3 tools/cluster_check.py --cases 3 --seed 23 --profile-rows 2 8 > /tmp/e3/check-$v.log 2>&1; echo "check $v rc=$? $((SECONDS-t0))s"
done
B4="--rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster"
B1="--tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster"
for k in 1 2; do
  for v in CL_LL_OWN=1 CL_LL_OWN=0 CL_LL_PACK3=1; do
    DECODER_SHELL_CUDA_DEFINES="$v" timeout 100 python3 tools/bench_replay.py $B4 > /tmp/e3/tp4-$v-$k.log 2>&1
    DECODER_SHELL_CUDA_DEFINES="$v" timeout 60 python3 tools/bench_replay.py $B1 > /tmp/e3/tp1-$v-$k.log 2>&1
    echo "round $k $v $((SECONDS-t0))s"
  done
done
python3 -m decoder_shell.cli synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 --out /tmp/f4 > /tmp/e3/synth.log 2>&1
timeout 100 python3 -m decoder_shell.cli replay /tmp/f4 --driver cuda --placement emulated --epochs 70 --changed 16 --cycle persistent-cluster > /tmp/e3/dv.log 2>&1; echo "dv rc=$? $((SECONDS-t0))s"
tar czf $S/logs.tgz -C /tmp e3
for f in /tmp/e3/tp4-*.log /tmp/e3/tp1-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
grep "EXACT\|MISMATCH" /tmp/e3/dv.log | head -3
for f in /tmp/e3/check-*.log; do echo "== $(basename $f)"; grep "^| random\|^| FMA\|^| watchdog\|^| TP4 M=[28] |" $f | cut -c1-560; done
