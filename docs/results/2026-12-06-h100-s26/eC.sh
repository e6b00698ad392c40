# call C: a step's late weight boxes requested at the step's own start (CL_LATE_AT=1) instead of after the step
# before's dot products, where they land during B beside the fold's loads; with the spare slot at eight rows
# (CL_WSPARE=8) the next step's first box still comes a step ahead. Exactness and step profiles (TP4 M=4/8) of
# CL_LATE_AT=1 CL_WSPARE=8, then three rounds alternating def / late / late8 / sp8 at TP4 M=4/8
S=/tmp/eC; mkdir -p $S/raw
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
DECODER_SHELL_CUDA_DEFINES="CL_LATE_AT=1 CL_WSPARE=8" timeout 200 python3 tools/cluster_check.py --cases 6 --seed 83 --profile-rows 4 8 --dump $S/raw --json $S/late8.json > $S/check-late8.log 2>&1; echo "check late8 rc=$? $((SECONDS-t0))s"
for k in 1 2 3; do for v in def late late8 sp8; do
  case $v in def) d="";; late) d="CL_LATE_AT=1";; late8) d="CL_LATE_AT=1 CL_WSPARE=8";; sp8) d="CL_WSPARE=8";; esac
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$v-$k.log 2>&1; echo "tp4 $v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt 420 ] && break 2
done; done
tar czf $OUT/eC.tgz -C /tmp eC
grep "^| random\|^| FMA\|^| watchdog" $S/check-late8.log | cut -c1-160
grep "^| TP[124] M=[0-9]" $S/check-late8.log | grep -v "SMs\|warps" | cut -c1-900
for f in $S/tp4-*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
