S=$OUT/e1; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail $S/pip.log; exit; }
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for k in none cluster cluster-fused fused-allreduce-mhc fused-m8 ring segmented-2 sinkhorn-inline all; do
  timeout 60 python3 .ab/diag5.py 5 0 $k 40 > $S/$k.log 2>&1; echo "$k rc=$? $((SECONDS-t0))s: $(tail -1 $S/$k.log | cut -c1-300)"
done
