#!/usr/bin/env bash
# The cluster cycle on a GPU in one call: checks and profile (tools/cluster_check.py), the bench against the
# graph path and the launch floor at TP4 M=1/2/4/8 and TP1 M=2, and a dsv4-flash TP4 draft + verify corpus
# replayed through `shell replay --cycle persistent-cluster` beside `--cycle graph`. Everything lands in $OUT;
# a summary table is printed last.   [THREADS="512 256"] [VARIANTS=...] [QUICK=1] bash tools/gpu_cluster.sh [CASES] [EPOCHS]
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
CASES=${1:-10}; EPOCHS=${2:-30}
S="python3 -m decoder_shell.cli"
summary=()
run() {  # name timeout command...
  local name=$1 t=$2; shift 2
  local t0=$SECONDS
  timeout "$t" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("| $name | rc=$rc | $((SECONDS - t0)) s |")
  tail -12 "$OUT/$name.log"
}
# every block size in THREADS (default: the driver's): checks, profile and the bench against the graph path
for T in ${THREADS:-0}; do
  export DECODER_SHELL_CUDA_CLUSTER_THREADS=${T#0}
  run check-t$T 240 python3 tools/cluster_check.py --cases "$CASES" --json "$OUT/check-t$T.json"
  if [ "${QUICK:-0}" != 1 ]; then
  run bench-tp4-t$T 200 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs "$EPOCHS" --only-main --no-torch \
    --persistent-cluster --json "$OUT/bench-tp4-t$T.json"
  run bench-tp1-t$T 60 python3 tools/bench_replay.py --tp 1 --rows 2 --epochs "$EPOCHS" --only-main --no-torch \
    --persistent-cluster --json "$OUT/bench-tp1-t$T.json"
  fi
done
unset DECODER_SHELL_CUDA_CLUSTER_THREADS
# tuning rows, profile only: tokens joined by ':', gN row groups a rank, tN threads a block, others compile
# defines (comma-separated), e.g. VARIANTS="t256 t512:CL_NO_JOIN g2:t512"
for v in ${VARIANTS:-}; do
  g=""; t=""; d=""
  for k in ${v//:/ }; do
    case $k in g[0-9]*) g=${k#g} ;; t[0-9]*) t=${k#t} ;; *) d="$d ${k//,/ }" ;; esac
  done
  name="profile-${v//[=,:]/_}"
  DECODER_SHELL_CUDA_CLUSTER_GROUPS=$g DECODER_SHELL_CUDA_CLUSTER_THREADS=$t DECODER_SHELL_CUDA_DEFINES="$d" run "$name" 120 \
    python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 --json "$OUT/$name.json"
done
if [ "${QUICK:-0}" != 1 ]; then
T=$(mktemp -d)
$S synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 --out "$T/f4" -q >/dev/null 2>&1
run replay-cluster 120 $S replay "$T/f4" --driver cuda --placement emulated --cycle persistent-cluster \
  --epochs 70 --changed 16 -q --json-out "$OUT/replay-cluster.json"
run replay-graph 120 $S replay "$T/f4" --driver cuda --placement emulated --cycle graph --epochs 70 --changed 16 -q
fi
printf '%s\n' "| stage | exit | time |" "|---|---|---|" "${summary[@]}"
# one archive comes back (the device returns at most 8 files)
tar czf /tmp/gpu_cluster.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/gpu_cluster.tgz "$OUT/gpu_cluster.tgz"
