# call D: a lone Sinkhorn warp sharing its scheduler with fewer helpers (CL_ISO_KEEP=K: K of the three helper warps
# on its sub-partition stay helpers). TP4 exactness and a step profile of CL_ISOLATE_SK=1 CL_ISO_KEEP=1; three rounds
# alternating def / iso (CL_ISOLATE_SK=1) / k1 / k2 at TP4 M=1/2; TP1 exactness of K=1; two rounds def / k1 / k2 at
# TP1 M=1/2 (where the rule is on by default)
S=/tmp/eD; mkdir -p $S/raw
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail -5 $S/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
DECODER_SHELL_CUDA_DEFINES="CL_ISOLATE_SK=1 CL_ISO_KEEP=1" timeout 150 python3 tools/cluster_check.py --cases 3 --seed 85 --profile-rows 2 --dump $S/raw --json $S/k1.json > $S/check-k1.log 2>&1; echo "check k1 rc=$? $((SECONDS-t0))s"
for k in 1 2 3; do for v in def iso k1 k2; do
  case $v in def) d="";; iso) d="CL_ISOLATE_SK=1";; k1) d="CL_ISOLATE_SK=1 CL_ISO_KEEP=1";; k2) d="CL_ISOLATE_SK=1 CL_ISO_KEEP=2";; esac
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp4-$v-$k.log 2>&1; echo "tp4 $v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt 330 ] && break 2
done; done
DECODER_SHELL_CUDA_DEFINES="CL_ISO_KEEP=1" timeout 100 python3 tools/cluster_check.py --tp 1 --cases 2 --seed 86 --profile-rows 2 > $S/check-tp1-k1.log 2>&1; echo "check tp1 k1 rc=$? $((SECONDS-t0))s"
for k in 1 2; do for v in def k1 k2; do
  case $v in def) d="";; k1) d="CL_ISO_KEEP=1";; k2) d="CL_ISO_KEEP=2";; esac
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 60 python3 tools/bench_replay.py --tp 1 --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster > $S/tp1-$v-$k.log 2>&1; echo "tp1 $v $k rc=$? $((SECONDS-t0))s"
  [ $((SECONDS-t0)) -gt 470 ] && break 2
done; done
tar czf $OUT/eD.tgz -C /tmp eD
for f in $S/check-*.log; do grep "^| random\|^| FMA\|^| watchdog" $f | cut -c1-120; grep "^| TP[124] M=[0-9] |" $f | cut -c1-560; done
for f in $S/tp*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-50) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1 | cut -c1-60)"; done
