# What the GPU scripts for MoE corpora share (sourced by tools/gpu_moe.sh, gpu_dense.sh, gpu_moe_combine.sh):
# the environment, a scratch folder T, the summary rows and rc_all, and replay NAME CORPUS [PLACEMENT]
# (graph and changed epochs on the cuda driver, its log and JSON in $OUT, one summary row).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
S="python3 -m decoder_shell.cli"
T=$(mktemp -d)
rc_all=0
summary=()
replay() {  # name corpus [placement]
  local name=$1 corpus=$2 placement=${3:-emulated}
  timeout 300 $S replay "$corpus" --driver cuda --placement "$placement" --epochs 20 --changed 2 -q \
    --json-out "$OUT/replay-$name.json" >"$OUT/replay-$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || rc_all=1
  summary+=("| replay $name | rc=$rc | $(grep -E '^(EXACT|NOT EXACT|MISMATCH)' "$OUT/replay-$name.log" | head -1) | $(grep 'slowest rank' "$OUT/replay-$name.log" | head -1 | tr -s ' │┃' ' ') |")
}
