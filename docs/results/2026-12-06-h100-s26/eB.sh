# call B: the lone Sinkhorn warp's rule at four ranks. Step profiles of TP4 M=1/2 with the rule in every build
# (CL_ISOLATE_SK=1) and the SM stamps; then three rounds alternating the default and CL_ISOLATE_SK=1 at TP4 M=1/2
S=/tmp/eB; mkdir -p $S/raw
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
DECODER_SHELL_CUDA_DEFINES="CL_SM_STAMP=1 CL_ISOLATE_SK=1" timeout 200 python3 tools/cluster_check.py --cases 0 --profile-rows 1 2 --dump $S/raw --json $S/tp4-iso.json > $S/check-tp4-iso.log 2>&1; echo "tp4 iso rc=$? $((SECONDS-t0))s"
for k in 1 2 3; do for v in def iso; do
  d=""; [ $v = iso ] && d=CL_ISOLATE_SK=1
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$v-$k.log 2>&1; echo "tp4 $v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt 400 ] && break 2
done; done
tar czf $OUT/eB.tgz -C /tmp eB
grep "^| TP[124] M=[0-9]" $S/check-tp4-iso.log | grep -v "SMs\|warps" | cut -c1-900
for f in $S/tp4-*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
