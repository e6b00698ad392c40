# call 2: is the spare weight box worth having at M=8 too, and where? Exactness of the committed build (random cycles,
# FMA build, watchdog, dsv4-flash TP4 draft + verify replay with changed epochs); then TP4 M=1/2/4/8, three rounds
# alternating: HEAD before the spare slot (.ab/head), the committed build (spare box at up to four rows), CL_WSPARE=8
# (also at eight rows, next step's first box at the step's start), CL_WSPARE=8 CL_WSPARE_AT=1 (at eight rows after C's
# barrier); TP1 and TP2 (one box a step: the spare slot is a second buffer at four rows) head vs new, two rounds;
# stamp profiles at M=4/8 of head and the two M=8 variants
S=/tmp/e2; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
timeout 150 python3 tools/cluster_check.py --cases 4 --seed 61 > $S/check.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
python3 -m decoder_shell.cli synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 --out /tmp/f4 > $S/synth.log 2>&1
timeout 120 python3 -m decoder_shell.cli replay /tmp/f4 --driver cuda --placement emulated --epochs 70 --changed 16 --cycle persistent-cluster > $S/dv.log 2>&1; echo "dv rc=$? $((SECONDS-t0))s"
run() { # variant tp round
  d=.; def=""; [ $1 = head ] && d=.ab/head; [ $1 = s8 ] && def="CL_WSPARE=8"; [ $1 = s8at ] && def="CL_WSPARE=8 CL_WSPARE_AT=1"
  (cd $d && DECODER_SHELL_CUDA_DEFINES="$def" timeout 80 python3 tools/bench_replay.py --tp $2 --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster) > $S/tp$2-$1-$3.log 2>&1; echo "bench tp$2 $1 $3 rc=$? $((SECONDS-t0))s"
}
for k in 1 2 3; do for v in head new s8 s8at; do run $v 4 $k; done; done
for k in 1 2; do for t in 1 2; do for v in head new; do run $v $t $k; done; done; done
for v in head s8 s8at; do
  d=.; def=""; [ $v = head ] && d=.ab/head; [ $v = s8 ] && def="CL_WSPARE=8"; [ $v = s8at ] && def="CL_WSPARE=8 CL_WSPARE_AT=1"
  (cd $d && DECODER_SHELL_CUDA_DEFINES="$def" timeout 60 python3 tools/cluster_check.py --cases 0 --profile-rows 4 8) > $S/profile-$v.log 2>&1; echo "profile $v rc=$? $((SECONDS-t0))s"
done
tar czf $OUT/e2.tgz -C /tmp e2
grep "^| random\|^| FMA\|^| watchdog" $S/check.log | cut -c1-200; tail -1 $S/dv.log | cut -c1-300
for f in $S/tp*.log; do echo "$(basename $f) $(grep '| shell baseline' $f | tail -1 | cut -c1-60) $(grep '| shell persistent-cluster' $f | tail -1) $(grep 'mismatching elements (shell persistent' $f | tail -1)"; done
for f in $S/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=[48] |" $f | cut -c1-330; done
