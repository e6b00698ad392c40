S=$OUT/e4; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail $S/pip.log; exit; }
export PYTHONPATH=/tmp/site
H=$PWD
timeout 30 python3 .ab/diag7.py 1024 1 1 cluster 20 > $S/seq.log 2>&1; echo "seq rc=$? $((SECONDS-t0))s"; grep -v "^  File\|^Thread\|^Timeout" $S/seq.log | tail -4
DECODER_SHELL_CUDA_SINKHORN=lanes timeout 30 python3 .ab/diag6.py 1024 1 1 cluster eager 20 > $S/lanes.log 2>&1; echo "lanes rc=$? $((SECONDS-t0))s: $(tail -1 $S/lanes.log | cut -c1-200)"
for c in 570cc61 fae8e27; do
  mkdir -p /tmp/t-$c && tar xzf .ab/t-$c.tgz -C /tmp/t-$c
  (cd /tmp/t-$c && timeout 30 python3 $H/.ab/diag6.py 1024 1 1 cluster eager 20 > $S/$c.log 2>&1; echo "$c rc=$? $((SECONDS-t0))s: $(tail -1 $S/$c.log | cut -c1-200)")
done
