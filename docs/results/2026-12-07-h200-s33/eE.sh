# call E (thirty-third session, whichever GPU comes): every block's raw stamps of one traced TP4 M=2 launch (--dump:
# [steps][blocks][16] .npz) for the default build and for a diagnosis build that also stamps thread 0's own stream
# values done, thread 0 past the wait for the step's weights (CL_WAIT_STAMP=1) and each block's SM (CL_SM_STAMP=1),
# to follow the step's critical path block by block offline; two rounds each.
S=$OUT/eE; mkdir -p $S
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
[ -d /tmp/site/blake3 ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for k in 1 2; do for v in def ws; do
  d=""; [ $v = ws ] && d="CL_WAIT_STAMP=1 CL_SM_STAMP=1"
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 2 --dump $S/$v$k --json $S/$v$k.json > $S/$v$k.log 2>&1; echo "$v $k rc=$? $((SECONDS-t0))s"
  grep "^| TP4 M=2 |\|warps" $S/$v$k.log | cut -c1-400
done; done
