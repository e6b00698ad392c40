S=$OUT/e7; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail $S/pip.log; exit; }
export PYTHONPATH=/tmp/site
KTRACE=1 DECODER_SHELL_CUDA_DEFINES=KDBG_TRACE timeout 30 python3 .ab/diag7.py 1024 1 1 cluster 12 > $S/trace.log 2>&1; echo "trace rc=$? $((SECONDS-t0))s"; grep -v "^  File\|^Thread" $S/trace.log | tail -22
r() { local n=$1; shift; DECODER_SHELL_CUDA_DEFINES="$D" timeout 30 python3 .ab/diag6.py "$@" > $S/$n.log 2>&1; echo "$n [$D] [$*] rc=$? $((SECONDS-t0))s: $(tail -1 $S/$n.log | cut -c1-200)"; }
D=KDBG_NOSK r a 7168 4 2 cluster graph 20
D=KDBG_NOSK r b 4096 2 8 cluster-fused graph 20
D=KDBG_NOSK r c 2048 8 4 cluster-fused eager 20 mhc_pre
DECODER_SHELL_CUDA_DEFINES=KDBG_NOSK timeout 400 python3 tools/cuda_check.py --cases 12 --seed 5 > $S/check5.log 2>&1; echo "check5 rc=$? $((SECONDS-t0))s"; grep "^|" $S/check5.log; tail -3 $S/check5.log | cut -c1-200
