# call 6: does the step's time depend on where its code lies? The same kernel with its step loop moved by 512, 1024,
# 2080 and 3200 bytes (CL_PAD=32/64/130/200: nanosleep instructions run once at the start; the loop's SASS is the
# default's but for 8 register names, checked with nvdisasm on the CPU): stamp profile at TP4 M=2/8 each
S=$OUT/e6; mkdir -p $S /tmp/e6
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e6/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for v in default CL_PAD=32 CL_PAD=64 CL_PAD=130 CL_PAD=200; do
  d="$v"; [ "$v" = default ] && d=""
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 90 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > /tmp/e6/profile-$v.log 2>&1; echo "$v rc=$? $((SECONDS-t0))s"
done
tar czf $S/logs.tgz -C /tmp e6
for f in /tmp/e6/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=[28] |" $f | cut -c1-330; done
