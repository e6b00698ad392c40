# call A: the peers' first wheels installed for call B; Nsight Compute on one launch of the default build at TP4 M=8
# and M=2 with source lines (DECODER_SHELL_CUDA_LINEINFO: the SASS is the same, the cubin carries line tables), the
# cubins disassembled with their lines (nvdisasm -g), so that every SASS instruction's executions and stall samples
# can be added up by source line; then the default build's benches, two rounds
S=/tmp/eA; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .wA/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
cp .wA/vllm-py.tgz /tmp/vllm-py.tgz
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
echo "pip $((SECONDS-t0))s"
DECODER_SHELL_CACHE=/tmp/dsc DECODER_SHELL_CUDA_LINEINFO=1 OUT=$S/ncu ROWS="8 2" timeout 420 bash tools/gpu_cluster_ncu.sh > $S/ncu.log 2>&1; echo "ncu rc=$? $((SECONDS-t0))s"
for f in /tmp/dsc/cubin/*.cubin; do nvdisasm -g -c $f 2>&1 | gzip > $S/ncu/$(basename $f .cubin | cut -c1-12).sass.txt.gz; done
for k in 1 2; do
  [ $((SECONDS-t0)) -gt 480 ] && break
  timeout 80 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$k.log 2>&1; echo "tp4 $k rc=$? $((SECONDS-t0))s"
done
tar czf $OUT/eA.tgz -C /tmp eA
grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Registers Per" $S/ncu/m*/details.txt | cut -c1-150
ls -la $S/ncu $S/ncu/m8 | head -20
for f in $S/tp4-*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
