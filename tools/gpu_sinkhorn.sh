#!/usr/bin/env bash
# The Sinkhorn forms on a GPU in one call (FORM against the default): the micro-benchmark of every form checked bit for bit
# (tools/sinkhorn_bench.py), the cluster cycle's checks and profile built with FORM, the same profile with the
# default form, the graph path's checks built with FORM (tools/cuda_check.py), and the bench of the graph path
# and the cluster cycle in both forms at TP4 M=1/2/4/8 and TP1 M=2. Everything lands in $OUT; a summary last.
#   [FORM=lanes] bash tools/gpu_sinkhorn.sh [CASES] [EPOCHS]
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
FORM=${FORM:-lanes}; CASES=${1:-3}; EPOCHS=${2:-30}
summary=()
run() {  # name timeout command...
  local name=$1 t=$2; shift 2
  local t0=$SECONDS
  timeout "$t" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("| $name | rc=$rc | $((SECONDS - t0)) s |")
  tail -6 "$OUT/$name.log"
}
run sinkhorn-bench 150 python3 tools/sinkhorn_bench.py --json "$OUT/sinkhorn-bench.json"
DECODER_SHELL_CUDA_SINKHORN=$FORM run check-cluster-$FORM 150 python3 tools/cluster_check.py --cases "$CASES" \
  --profile-rows 2 8 --json "$OUT/check-cluster-$FORM.json"
run profile-cluster-default 90 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 --json "$OUT/profile-cluster-default.json"
run bench-tp4 200 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs "$EPOCHS" --only-main --no-torch \
  --persistent-cluster --sinkhorn-forms "$FORM" --json "$OUT/bench-tp4.json"
run bench-tp1 90 python3 tools/bench_replay.py --tp 1 --rows 2 --epochs "$EPOCHS" --only-main --no-torch \
  --persistent-cluster --sinkhorn-forms "$FORM" --json "$OUT/bench-tp1.json"
DECODER_SHELL_CUDA_SINKHORN=$FORM run check-graph-$FORM 150 python3 tools/cuda_check.py --cases "$CASES" \
  --json "$OUT/check-graph-$FORM.json"
printf '%s\n' "| stage | exit | time |" "|---|---|---|" "${summary[@]}"
tar czf /tmp/gpu_sinkhorn.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/gpu_sinkhorn.tgz "$OUT/gpu_sinkhorn.tgz"
