S=$OUT/e8; mkdir -p $S
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 60 python3 tools/bf16_check.py > $S/bf16.log 2>&1; echo "bf16 rc=$?"; grep "^|" $S/bf16.log
timeout 60 python3 tools/div_check.py --denominators 4096 > $S/div.log 2>&1; echo "div rc=$?"; grep "^|" $S/div.log
timeout 90 python3 -m pytest -q tests/test_cuda.py -k short_quotient > $S/t.log 2>&1; echo "test rc=$?"; tail -1 $S/t.log
