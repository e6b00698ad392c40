#!/usr/bin/env bash
# MoE draft commands on the cuda driver, one command on one GPU (docs/MOE.md):
#  1. replay of tiny-moe corpora (TP2, DSpark 3 stages, T=5), packed and expanded weights: graph and changed
#     epochs, every output of every rank bit-exact;
#  2. replay of a dsv41-draft corpus (TP2, MTP1, T=5, packed) and the gate of its expert commands on bf16
#     weights decoded on the device (candidate experts=moe-expanded) against the packed baseline: both exact,
#     and the time the expanded form saves or costs per cycle;
#  3. the gate of the same corpus's expert commands on the spread linear kernels (experts=moe-spread) against
#     the warp kernels: exact, and the time per cycle; and the gate of its gate commands on the split gate kernel
#     (moe_gate=moe-gate-split) against the row gate: exact, and the time per cycle;
#  4. tools/cuda_check_moe.py with few cases: every MoE kernel against its contract and the routed-expert
#     figure table (T = 5, 10, 20, 32 vs the HBM time of the expert bytes, torch eager and CUDA graph).
# Usage: OUT=dir bash tools/gpu_moe.sh [--with-expanded-dsv41]   (the option adds a dsv41 expanded corpus:
# minutes more of host work and over 15 GB of host memory for its synth). Logs and JSON land in $OUT; a
# summary table is printed at the end. Exit 0 when every replay and the kernel check are exact.
. "$(dirname "$0")/gpu_lib.sh"
for w in packed expanded; do
  $S synth --preset tiny-moe --tp 2 --verify-rows 2 --draft-rows 5 --draft-kind dspark --moe-weights $w \
    --seed 3 --out "$T/tiny-$w" -q >"$OUT/synth-tiny-$w.log" 2>&1 || { echo "synth tiny-$w failed"; rc_all=2; }
  replay "tiny-moe-$w" "$T/tiny-$w"
done
$S synth --preset dsv41-draft --tp 2 --verify-rows 2 --draft-rows 5 --draft-kind mtp1 --out "$T/dsv41-packed" -q \
  >"$OUT/synth-dsv41-packed.log" 2>&1 || { echo "synth dsv41-packed failed"; rc_all=2; }
replay dsv41-packed "$T/dsv41-packed"
if [ "${1:-}" = "--with-expanded-dsv41" ]; then
  $S synth --preset dsv41-draft --tp 2 --verify-rows 2 --draft-rows 5 --draft-kind mtp1 --moe-weights expanded \
    --out "$T/dsv41-expanded" -q >"$OUT/synth-dsv41-expanded.log" 2>&1 || { echo "synth dsv41-expanded failed"; rc_all=2; }
  replay dsv41-expanded "$T/dsv41-expanded"
fi
timeout 300 $S gate "$T/dsv41-packed" --driver cuda --placement emulated --candidate experts=moe-expanded \
  --epochs 20 --changed 1 --reps 3 -q --out "$OUT/gate-moe-expanded.json" >"$OUT/gate-moe-expanded.log" 2>&1
rc=$?
summary+=("| gate dsv41 experts=moe-expanded | rc=$rc | $(grep -E 'PASS|FAIL|UNTIMED|verdict' "$OUT/gate-moe-expanded.log" | head -2 | tr '\n' ' ') |")
timeout 300 $S gate "$T/dsv41-packed" --driver cuda --placement emulated --candidate experts=moe-spread \
  --epochs 20 --changed 1 --reps 3 -q --out "$OUT/gate-moe-spread.json" >"$OUT/gate-moe-spread.log" 2>&1
rc=$?
summary+=("| gate dsv41 experts=moe-spread | rc=$rc | $(grep -E 'PASS|FAIL|UNTIMED|verdict' "$OUT/gate-moe-spread.log" | head -2 | tr '\n' ' ') |")
timeout 300 $S gate "$T/dsv41-packed" --driver cuda --placement emulated --candidate moe_gate=moe-gate-split \
  --epochs 20 --changed 1 --reps 3 -q --out "$OUT/gate-moe-gate-split.json" >"$OUT/gate-moe-gate-split.log" 2>&1
rc=$?
summary+=("| gate dsv41 moe_gate=moe-gate-split | rc=$rc | $(grep -E 'PASS|FAIL|UNTIMED|verdict' "$OUT/gate-moe-gate-split.log" | head -2 | tr '\n' ' ') |")
timeout 300 python3 tools/cuda_check_moe.py --cases 6 --reps 20 --json "$OUT/moe-check.json" >"$OUT/moe-check.log" 2>&1
rc=$?
[ $rc -eq 0 ] || rc_all=1
echo "| step | exit | result | |"; echo "|---|---|---|---|"
printf '%s\n' "${summary[@]}"
echo; echo "cuda_check_moe (rc=$rc):"; cat "$OUT/moe-check.log"
echo; echo "gate (dsv41, packed baseline vs experts=moe-expanded):"; tail -25 "$OUT/gate-moe-expanded.log"
echo; echo "gate (dsv41, warp-kernel baseline vs experts=moe-spread):"; tail -25 "$OUT/gate-moe-spread.log"
echo; echo "gate (dsv41, row-gate baseline vs moe_gate=moe-gate-split):"; tail -25 "$OUT/gate-moe-gate-split.log"
rm -rf "$T"
exit $rc_all
