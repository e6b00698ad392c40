# call 4: a fold batch's elements folded side by side before any store (HEAD) against one after the other (.ab/base:
# call 2's build, in the same call): random cycles bit for bit and the stamp profile at TP4 M=2/8; the cycle at TP4
# M=1/2/4/8 and TP1 M=2 alternating, two rounds; the helpers folding every element (CL_LL_SPLIT=0) at M=4/8; TP2
# M=2/8; the draft + verify replay
S=$OUT/e4; mkdir -p $S /tmp/e4
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e4/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 150 python3 tools/cluster_check.py --cases 6 --seed 29 --profile-rows 2 8 > /tmp/e4/check.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
B4="--rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster"
B1="--tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster"
B2="--tp 2 --rows 2 8 --epochs 30 --only-main --no-torch --persistent-cluster"
for k in 1 2; do
  for v in base new; do
    T=tools; [ $v = base ] && T=.ab/base/tools
    timeout 100 python3 $T/bench_replay.py $B4 > /tmp/e4/tp4-$v-$k.log 2>&1
    timeout 60 python3 $T/bench_replay.py $B1 > /tmp/e4/tp1-$v-$k.log 2>&1
    echo "round $k $v $((SECONDS-t0))s"
  done
  DECODER_SHELL_CUDA_DEFINES="CL_LL_SPLIT=0" timeout 100 python3 tools/bench_replay.py --rows 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > /tmp/e4/tp4-nosplit-$k.log 2>&1
done
for v in base new; do T=tools; [ $v = base ] && T=.ab/base/tools; timeout 80 python3 $T/bench_replay.py $B2 > /tmp/e4/tp2-$v.log 2>&1; done; echo "tp2 $((SECONDS-t0))s"
python3 -m decoder_shell.cli synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 --out /tmp/f4 > /tmp/e4/synth.log 2>&1
timeout 100 python3 -m decoder_shell.cli replay /tmp/f4 --driver cuda --placement emulated --epochs 70 --changed 16 --cycle persistent-cluster > /tmp/e4/dv.log 2>&1; echo "dv rc=$? $((SECONDS-t0))s"
tar czf $S/logs.tgz -C /tmp e4
for f in /tmp/e4/tp4-*.log /tmp/e4/tp1-*.log /tmp/e4/tp2-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
grep "EXACT\|MISMATCH" /tmp/e4/dv.log | head -3
grep "^| random\|^| FMA\|^| watchdog\|^| TP4 M=[28] |" /tmp/e4/check.log | cut -c1-600
