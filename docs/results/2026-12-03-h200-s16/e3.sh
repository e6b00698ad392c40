S=$OUT/e3; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $S/pip.log 2>&1 || { echo pip failed; tail $S/pip.log; exit; }
export PYTHONPATH=/tmp/site
r() { local n=$1; shift; timeout 30 python3 $HOME_TREE/.ab/diag6.py "$@" > $S/$n.log 2>&1; echo "$n [$*] rc=$? $((SECONDS-t0))s: $(tail -1 $S/$n.log | cut -c1-220)"; }
HOME_TREE=$PWD
r head-1024 1024 1 1 cluster eager 20
r head-2048 2048 1 1 cluster eager 20
r head-4096x2 4096 2 2 cluster eager 20
r head-ph 1024 1 1 cluster eager 20 mhc_post_head
r head-pre 1024 1 1 cluster eager 20 mhc_pre
for c in 4e300e1 4ad69ce 671ed58 7854284 cd85280 31c81a3; do
  mkdir -p /tmp/t-$c && tar xzf .ab/t-$c.tgz -C /tmp/t-$c
  (cd /tmp/t-$c && r $c 1024 1 1 cluster eager 20)
done
