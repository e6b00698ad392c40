# call 7: the short quotient in the grid-barrier persistent kernels (post_comb_from's Sinkhorn): the draft + verify
# corpus replayed exact through --cycle persistent and persistent-flags, and the shipped corpus through auto
S=$OUT/e7; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -m decoder_shell.cli synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 --out /tmp/f4 > /tmp/synth.log 2>&1
for c in persistent persistent-flags; do
  timeout 120 python3 -m decoder_shell.cli replay /tmp/f4 --driver cuda --placement emulated --epochs 20 --changed 4 --cycle $c > $S/dv-$c.log 2>&1; echo "dv $c rc=$? $((SECONDS-t0))s"
done
timeout 120 python3 -m decoder_shell.cli replay --driver cuda --epochs 70 > $S/shipped.log 2>&1; echo "shipped rc=$? $((SECONDS-t0))s"
for f in $S/*.log; do echo "== $(basename $f)"; grep "slowest rank\|EXACT\|MISMATCH\|driver " $f; done
