# call A: the peers' first wheels installed for call B; the Sinkhorn micro-benchmark per form (lanes-smem new: the
# halves' sums read from shared memory as one 16-byte load instead of four shuffles); lanes-smem's exactness in the
# cluster cycle (random cycles, FMA build, watchdog) and its step profile beside the default's; then two rounds
# alternating the default (lanes-fast) and lanes-smem, TP4 M=1/2/4/8 and TP1 M=2; the faster form into /tmp/choice
S=/tmp/eA; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .wA/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
cp .wA/vllm-py.tgz /tmp/vllm-py.tgz
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
echo "pip $((SECONDS-t0))s"
timeout 120 python3 tools/sinkhorn_bench.py --no-registers --json $S/sk.json > $S/sk.log 2>&1; echo "sk rc=$? $((SECONDS-t0))s"
DECODER_SHELL_CUDA_SINKHORN=lanes-smem timeout 150 python3 tools/cluster_check.py --cases 2 --seed 75 --profile-rows 1 2 4 8 > $S/check-smem.log 2>&1; echo "check smem rc=$? $((SECONDS-t0))s"
timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > $S/profile-def.log 2>&1; echo "profile def rc=$? $((SECONDS-t0))s"
for k in 1 2; do for v in def smem; do
  f=lanes-fast; [ $v = smem ] && f=lanes-smem
  DECODER_SHELL_CUDA_SINKHORN=$f timeout 80 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/ab-$v-$k.log 2>&1; echo "bench $v $k rc=$? $((SECONDS-t0))s"
  DECODER_SHELL_CUDA_SINKHORN=$f timeout 50 python3 tools/bench_replay.py --tp 1 --rows 2 --epochs 30 --only-main --no-torch --persistent-cluster > $S/ab1-$v-$k.log 2>&1; echo "bench1 $v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt 530 ] && break 2
done; done
python3 - <<'PY' > $S/choice.txt
import glob, re, statistics
m = {}
for v in ("def", "smem"):
    xs = []
    for f in glob.glob(f"/tmp/eA/ab-{v}-*.log"):
        rows = [l for l in open(f) if l.startswith("| shell persistent-cluster")]
        mm = [l for l in open(f) if l.startswith("| mismatching elements (shell persistent-cluster)")]
        if rows and mm and set(re.findall(r"\d+", mm[-1].split("|", 2)[2])) <= {"0"}:
            xs.append(float(rows[-1].split("|")[3]))
    m[v] = statistics.median(xs) if xs else 9e9
print("lanes-smem" if m["smem"] < m["def"] else "lanes-fast", m)
PY
cut -d' ' -f1 $S/choice.txt > /tmp/choice
tar czf $OUT/eA.tgz -C /tmp eA
cat $S/choice.txt
grep -i "cycles\|exact\|mismatch" $S/sk.log | grep -i "sinkhorn_lane whole\|form\|mismatch" | head -12 | cut -c1-160
grep "^| random\|^| FMA\|^| watchdog" $S/check-smem.log | cut -c1-160
grep "^| TP[14] M=[0-9] |" $S/check-smem.log $S/profile-def.log | cut -c1-330
for f in $S/ab*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
