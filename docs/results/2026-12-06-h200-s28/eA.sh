# call A: the helpers' path in B. new: a helper's y elements in registers, every load before any store (CL_Y_REGS=1)
# and its words published by one loop per word kind with 32-bit offsets (CL_PUB_REGS=1); y: the first alone; old:
# neither (the default: byte for byte 5ad6a35's cubins). Exactness of new at TP4 and TP2 (random cycles, both ring
# directions, the FMA build, the watchdog) with its step profiles, the old build's profiles, then rounds
# alternating, TP4 M=1/2/4/8
S=$OUT/eA; mkdir -p $S  # (the logs written where they come back even if the call is cut short)
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
DECODER_SHELL_CUDA_DEFINES="CL_Y_REGS=1 CL_PUB_REGS=1" timeout 150 python3 tools/cluster_check.py --cases 3 --seed 281 --profile-rows 2 8 > $S/check-tp4.log 2>&1; echo "check tp4 rc=$? $((SECONDS-t0))s"
DECODER_SHELL_CUDA_DEFINES="CL_Y_REGS=1 CL_PUB_REGS=1" timeout 100 python3 tools/cluster_check.py --tp 2 --cases 1 --seed 282 --profile-rows 8 > $S/check-tp2.log 2>&1; echo "check tp2 rc=$? $((SECONDS-t0))s"
timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > $S/profile-old.log 2>&1; echo "profile old rc=$? $((SECONDS-t0))s"
for k in 1 2 3 4 5; do for v in new old y; do
  d="CL_Y_REGS=1 CL_PUB_REGS=1"; [ $v = old ] && d=""; [ $v = y ] && d="CL_Y_REGS=1"
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$v-$k.log 2>&1; echo "tp4 $v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt ${CAP:-300} ] && break 2
done; done
grep "^| random\|^| FMA\|^| watchdog" $S/check-tp4.log $S/check-tp2.log | cut -c1-140
grep "^| TP[124] M=[0-9] |" $S/check-tp4.log $S/check-tp2.log $S/profile-old.log | cut -c1-420
for f in $S/tp*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
