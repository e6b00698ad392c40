#!/usr/bin/env bash
# replay --breakdown on a CUDA machine (one call): the dsv4-flash TP4 M=2 cycle, ranks emulated on one
# GPU; 70 graph epochs and 16 changed epochs checked bit-exact, then one epoch timed kernel by kernel.
# Prints the exactness and timing tables, the per-kind/per-phase breakdown and the all-reduce
# bandwidths; writes replay.json (the result schema of docs/RESULTS.md), replay.csv, replay.png and
# the per-node table (breakdown.log) under ${OUT:-out}/. Exit status: that of `shell replay`.
# Usage: bash tools/gpu_breakdown.sh [verify-rows]
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
M=${1:-2}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-} COLUMNS=${COLUMNS:-150}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m decoder_shell.cli synth --preset dsv4-flash --tp 4 --verify-rows "$M" --draft-rows 1 --out /tmp/flash-bd -q
python3 -m decoder_shell.cli replay /tmp/flash-bd --driver cuda --placement emulated --epochs 70 --changed 16 \
  --breakdown -v --json-out "$OUT/replay.json" --csv "$OUT/replay.csv" --plot "$OUT/replay.png" \
  >"$OUT/breakdown.log" 2>"$OUT/replay.stderr"
rc=$?
# everything but the per-node table (in breakdown.log) and the per-epoch lines of -v (in replay.stderr)
sed '/time per node, ms/,$d' "$OUT/breakdown.log"
tail -n 3 "$OUT/replay.stderr"
echo "rc=$rc"
exit $rc
