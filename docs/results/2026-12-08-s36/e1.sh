# call 1 (thirty-sixth session): the partials' exchange in other forms. First alone (tools/sync_bench.py modes 8-10
# beside the cycle's st.async exchange, mode 2) at 4 ranks x 2 rows and 1 x 2; then in the cycle, the two-hop
# exchange (CL_XHOP2=3: the one- and two-row builds): its checks (a random cycle, the FMA build caught) with its
# TP4 M=2 profile, and alternating bench rounds against the default: TP4 M=1/2, TP1 M=1/2, TP4 again.
S=$OUT/e1; mkdir -p $S
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader | tee $S/gpu.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1 || { echo pip failed; tail -5 /tmp/pip.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for rr in "4 2" "1 2"; do set -- $rr
  echo "=== ranks $1 rows $2" >> $S/sync.log
  timeout 100 python3 tools/sync_bench.py --ranks $1 --rows $2 >> $S/sync.log 2>&1; echo "sync $1 $2 rc=$? $((SECONDS-t0))s"
done
DECODER_SHELL_CUDA_DEFINES="CL_XHOP2=3" timeout 120 python3 tools/cluster_check.py --cases 1 --seed 361 --profile-rows 2 > $S/check-xhop2.log 2>&1; echo "check xhop2 rc=$? $((SECONDS-t0))s"
for kt in "1 4" "1 1" "2 4"; do set -- $kt; for d in "" CL_XHOP2=3; do
  [ $SECONDS -gt $((t0 + 170)) ] && break 2  # (a short lease: the rounds that fit)
  echo "=== $1 ${d:-default} tp$2" >> $S/bench.log
  DECODER_SHELL_CUDA_DEFINES="$d" timeout 50 python3 tools/bench_replay.py --tp $2 --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster >> $S/bench.log 2>&1; echo "bench $1 ${d:-default} tp$2 rc=$? $((SECONDS-t0))s"
done; done
cat $S/sync.log
for f in $S/check-*.log; do echo "== $f"; grep "^case\|^| random\|^| FMA\|^| watchdog\|^| TP4 M=2 |\|^| TP4 M=2 sync\|^| TP4 M=2 exchange" $f | cut -c1-330; done
grep "^=== \|| shell persistent-cluster\|mismatching elements (shell persistent" $S/bench.log | cut -c1-100
