# call C: one round of the cluster cycle's tuning defines against the default (TP4 M=2/8, 30 epochs each), the default
# first, between the variants and last; every row's mismatch count with it
S=/tmp/eC; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
i=0
for d in "" CL_LOOKAHEAD=2 CL_LOOKAHEAD=4 CL_PART_AHEAD=1 CL_PART_AHEAD=3 "" CL_LL_WORDS=8 CL_LL_WORDS=16 CL_LL_WORDS32=8 CL_LL_SPLIT=0 CL_EVICT_FIRST=0 "" CL_LANES_UNROLL=2 CL_LANES_UNROLL=8 CL_DOT_TILE=0 CL_SV_PAIRS=8 CL_SV_PAIRS=2 ""; do
  i=$((i+1))
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 2 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/v$i.log 2>&1
  echo "v$i [${d:-default}] rc=$? $((SECONDS-t0))s $(grep '| shell persistent-cluster' $S/v$i.log | tail -1) $(grep 'mismatching elements (shell persistent' $S/v$i.log | tail -1 | cut -c50-80)" | tee -a $S/table.txt > /dev/null
  [ $((SECONDS-t0)) -gt 560 ] && break
done
tar czf $OUT/eC.tgz -C /tmp eC
cat $S/table.txt
