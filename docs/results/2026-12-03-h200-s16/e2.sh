S=$OUT/e2; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail $S/pip.log; exit; }
export PYTHONPATH=/tmp/site
r() { timeout 40 python3 .ab/diag5.py 5 0 $1 25 $2 > $S/$1-$2.log 2>&1; echo "$1 $2 rc=$? $((SECONDS-t0))s: $(grep -c ^ran $S/$1-$2.log) ran; $(tail -1 $S/$1-$2.log | cut -c1-200)"; }
r i:3 eager
r i:3 graph
r i:13 eager
r i:13 graph
r i:9 eager
r i:21 eager
