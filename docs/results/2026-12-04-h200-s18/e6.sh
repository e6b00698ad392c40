# call 6: what the all-reduce's words cost at four and eight rows, where the helpers' chain (y, the rank's
# barrier, publishing, the fold) is B's: a timing ablation (inexact) that publishes and folds the words of a
# third of the elements (CL_LL_THIRD: as many words as three bf16 values a 64-bit word would take); stamp
# profile at TP4 M=2/8 and the cycle at TP4 M=2/4/8, against the default, two rounds
S=$OUT/e6; mkdir -p $S /tmp/e6
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e6/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
B4="--rows 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster"
for v in default CL_LL_THIRD; do
  d=$v; [ $v = default ] && d=""
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 100 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 > /tmp/e6/profile-$v.log 2>&1; echo "profile $v rc=$? $((SECONDS-t0))s"
done
for k in 1 2; do
  for v in default CL_LL_THIRD; do
    d=$v; [ $v = default ] && d=""
    DECODER_SHELL_CUDA_DEFINES="$d" timeout 100 python3 tools/bench_replay.py $B4 > /tmp/e6/tp4-$v-$k.log 2>&1
    echo "round $k $v $((SECONDS-t0))s"
  done
done
tar czf $S/logs.tgz -C /tmp e6
for f in /tmp/e6/tp4-*.log; do echo "$(basename $f) $(grep '| shell persistent-cluster' $f | tail -1)"; done
for f in /tmp/e6/profile-*.log; do echo "== $(basename $f)"; grep "^| TP4 M=[28] |\|^| TP4 M=8 every" $f | cut -c1-520; done
