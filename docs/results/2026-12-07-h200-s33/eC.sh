# call C (thirty-third session, whichever GPU comes): the weight copy requested by the block's last thread
# (CL_FETCH_LAST=1) beside the stream values two lanes a thread at every row count (CL_SV_LANE2=1), where the last
# warps have no stream values at one and two rows: exactness of the pair (random cycles, profile at M=2), then TP4
# M=1/2 in two rounds of the four builds alternating (bench logs appended to one file).
S=$OUT/eX; mkdir -p $S
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
[ -d /tmp/site/blake3 ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
DECODER_SHELL_CUDA_DEFINES="CL_FETCH_LAST=1 CL_SV_LANE2=1" timeout 110 python3 tools/cluster_check.py --cases 1 --seed 333 --profile-rows 2 > $S/check-fl2.log 2>&1; echo "check fl2 rc=$? $((SECONDS-t0))s"
for k in 1 2; do for v in def f l2 fl2; do
  case $v in def) d="";; f) d="CL_FETCH_LAST=1";; l2) d="CL_SV_LANE2=1";; fl2) d="CL_FETCH_LAST=1 CL_SV_LANE2=1";; esac
  [ $((SECONDS-t0)) -gt ${CAP:-470} ] && break 2
  echo "=== tp4 $v $k" >> $S/bench.log
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 50 python3 tools/bench_replay.py --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "tp4 $v $k rc=$? $((SECONDS-t0))s"
done; done
grep "^| random\|^| FMA\|^| watchdog\|^| TP4 M=2 |" $S/check-fl2.log | cut -c1-420
grep "^=== \|| shell baseline\|| shell persistent-cluster\|mismatching elements (shell persistent" $S/bench.log | cut -c1-110
