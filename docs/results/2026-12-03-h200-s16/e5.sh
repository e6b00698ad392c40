S=$OUT/e5; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail $S/pip.log; exit; }
export PYTHONPATH=/tmp/site
which compute-sanitizer; ls /usr/local/cuda*/bin 2>/dev/null | grep -i sanit
r() { local n=$1; shift; DECODER_SHELL_CUDA_DEFINES="$D" timeout 30 python3 .ab/diag6.py "$@" > $S/$n.log 2>&1; echo "$n [$D] [$*] rc=$? $((SECONDS-t0))s: $(tail -1 $S/$n.log | cut -c1-200)"; }
D=KDBG_NOALIGN r noalign 1024 1 1 cluster eager 20
D=KDBG_SYNCWARP r syncwarp 1024 1 1 cluster eager 20
D=SINKHORN_UNROLL=1 r unroll1 1024 1 1 cluster eager 20
D= r plain 1024 1 1 cluster eager 20
