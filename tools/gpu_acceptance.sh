#!/usr/bin/env bash
# GPU acceptance run (one call on a CUDA machine): kernel-vs-contract check, the dsv4-flash TP4 M=2
# replay with changed epochs, and the replay benchmark. Writes logs and JSON under ${OUT:-out}/.
# Usage: bash tools/gpu_acceptance.sh [cases] [bench-rows...]
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
CASES=${1:-60}; shift || true
ROWS=${*:-1 2 4 8}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
step() { local name=$1; shift; echo "== $name"; local t0=$SECONDS; timeout "${LIMIT:-240}" "$@" >"$OUT/$name.log" 2>&1; local rc=$?; echo "rc=$rc ($((SECONDS - t0)) s)"; tail -n "${TAIL:-25}" "$OUT/$name.log"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
step check python3 tools/cuda_check.py --cases "$CASES" --json "$OUT/check.json"
step synth python3 -m decoder_shell.cli synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 --out /tmp/flash4
step replay python3 -m decoder_shell.cli replay /tmp/flash4 --driver cuda --epochs 70 --changed 16 --json-out "$OUT/replay.json" --plot "$OUT/replay.png"
LIMIT=400 step bench python3 tools/bench_replay.py --rows $ROWS --json "$OUT/bench.json"
