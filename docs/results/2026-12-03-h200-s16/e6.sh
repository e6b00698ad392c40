S=$OUT/e6; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail $S/pip.log; exit; }
export PYTHONPATH=/tmp/site
r() { local n=$1; shift; DECODER_SHELL_CUDA_DEFINES="$D" timeout 30 python3 .ab/diag6.py "$@" > $S/$n.log 2>&1; echo "$n [$D] [$*] rc=$? $((SECONDS-t0))s: $(tail -1 $S/$n.log | cut -c1-200)"; }
D=KDBG_NOSK r nosk 1024 1 1 cluster eager 20
D=KDBG_NOSK r nosk-pre 1024 1 1 cluster eager 20 mhc_pre
KTRACE=1 DECODER_SHELL_CUDA_DEFINES=KDBG_TRACE timeout 30 python3 .ab/diag7.py 1024 1 1 cluster 20 > $S/trace.log 2>&1; echo "trace rc=$? $((SECONDS-t0))s"; grep -v "^  File\|^Thread" $S/trace.log | tail -14
timeout 90 compute-sanitizer --tool memcheck python3 .ab/diag6.py 1024 1 1 cluster eager 80 > $S/memcheck.log 2>&1; echo "memcheck rc=$? $((SECONDS-t0))s"; grep -v "^  File" $S/memcheck.log | head -30
