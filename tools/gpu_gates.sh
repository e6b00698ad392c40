#!/usr/bin/env bash
# GPU gate runs (dsv4-flash, TP4 emulated): fused candidates at M=2/4/8, the fused all-reduce + mHC,
# a deliberately inexact candidate, and deletion bounds for all mHC commands and all collectives.
# Verdict JSON and plots land under ${OUT:-out}/. Usage: bash tools/gpu_gates.sh [epochs] [changed]
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
EP=${1:-30}; CH=${2:-4}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
S="python3 -m decoder_shell.cli"
for m in 2 4 8; do
  [ -d /tmp/g$m ] || $S synth --preset dsv4-flash --tp 4 --verify-rows $m --draft-rows 0 --out /tmp/g$m >/dev/null
done
gate() { local name=$1; shift; echo "== $name"; timeout 200 $S gate "$@" --epochs "$EP" --changed "$CH" --reps 3 \
  --driver cuda --out "$OUT/$name.json" >"$OUT/$name.log" 2>&1; echo "rc=$?"; grep -E "verdict|saved|PASS|FAIL|UNTIMED|mismatch" "$OUT/$name.log" | tail -4; }
gate fused-m2 /tmp/g2 --candidate mhc=fused-m2
gate fused-m4 /tmp/g4 --candidate mhc=fused-m4
gate fused-m8 /tmp/g8 --candidate mhc=fused-m8
gate fused-allreduce-mhc-m2 /tmp/g2 --candidate mhc=fused-allreduce-mhc
gate fma-m2 /tmp/g2 --candidate mhc=fma
gate delete-mhc-m2 /tmp/g2 --delete mhc
gate delete-collectives-m2 /tmp/g2 --delete collectives
