S=$OUT/e8; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail $S/pip.log; exit; }
export PYTHONPATH=/tmp/site
python3 -c "import pytest, hypothesis; print('pytest', pytest.__version__)" 2>&1 | tail -1
mkdir -p /tmp/spin && printf 'extern "C" __global__ void spin(int* y) {\n  volatile int* p = y; while (p[0] != 12345) {}\n}\n' > /tmp/spin/spin.cu
echo '{"source": "spin.cu", "entry": "spin", "grid": [1], "block": [32], "args": ["out:y"], "op": "mhc_post_pre"}' > /tmp/spin/spin.json
DECODER_SHELL_CUDA_DEADLINE_S=3 timeout 120 python3 -m decoder_shell.cli gate corpus --driver cuda --candidate mhc_post_pre=@/tmp/spin/spin.json --epochs 2 > $S/spin.out 2> $S/spin.err; echo "spin rc=$? $((SECONDS-t0))s"; cat $S/spin.err | tail -5
DECODER_SHELL_CUDA_DEADLINE_S=30 timeout 500 python3 tools/cuda_check.py --cases 12 --seed 5 --json $S/check5.json > $S/check5.log 2> $S/check5.err; echo "check5 rc=$? $((SECONDS-t0))s"; grep "^|" $S/check5.log; tail -2 $S/check5.err
