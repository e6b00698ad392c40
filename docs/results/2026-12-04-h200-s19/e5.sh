# call 5: what C (stream values) and A (dot products) cost with their instructions already cached: timing
# ablations that run each twice through the same code (CL_C_TWICE, CL_A_TWICE: a rolled loop of two passes);
# stamp profile at TP4 M=2/8 against the default (call 2's kernel, SASS unchanged)
S=$OUT/e5; mkdir -p $S /tmp/e5
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e5/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for v in default CL_C_TWICE CL_A_TWICE; do
  d="$v"; [ "$v" = default ] && d=""
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 90 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > /tmp/e5/profile-$v.log 2>&1; echo "$v rc=$? $((SECONDS-t0))s"
done
tar czf $S/logs.tgz -C /tmp e5
for f in /tmp/e5/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=[28] |" $f | cut -c1-520; done
