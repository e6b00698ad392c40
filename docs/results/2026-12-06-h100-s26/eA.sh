# call A: where the four-rank step's last publisher falls behind. Step profiles with each block's SM recorded
# (CL_SM_STAMP=1, a diagnosis build) and every block's raw stamps kept: TP4 M=1/2/8, TP2 M=2, TP1 M=2
S=/tmp/eA; mkdir -p $S/raw
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
export DECODER_SHELL_CUDA_DEFINES="CL_SM_STAMP=1"
timeout 200 python3 tools/cluster_check.py --cases 0 --profile-rows 1 2 8 --dump $S/raw --json $S/tp4.json > $S/check-tp4.log 2>&1; echo "tp4 rc=$? $((SECONDS-t0))s"
timeout 120 python3 tools/cluster_check.py --tp 2 --cases 0 --profile-rows 2 --dump $S/raw --json $S/tp2.json > $S/check-tp2.log 2>&1; echo "tp2 rc=$? $((SECONDS-t0))s"
timeout 120 python3 tools/cluster_check.py --tp 1 --cases 0 --profile-rows 2 --dump $S/raw --json $S/tp1.json > $S/check-tp1.log 2>&1; echo "tp1 rc=$? $((SECONDS-t0))s"
tar czf $OUT/eA.tgz -C /tmp eA
for f in $S/check-tp*.log; do grep "^| TP[124] M=[0-9]" $f | grep -v "sync only\|warps" | cut -c1-700; tail -3 $f | grep -i "error\|Trace" ; done
