#!/usr/bin/env bash
# The draft's dense attention commands on the cuda driver, one command on one GPU (docs/MOE.md):
#  1. replay of tiny-moe-attn corpora (TP2, DSpark 3 stages, T=5), packed and expanded weights: graph and
#     changed epochs, every output of every rank bit-exact;
#  2. replay of a dsv41-draft-attn corpus (TP2, MTP1, T=5, packed) and the gate of its dense projections on
#     bf16 weights decoded on the device (candidate projections=moe-expanded) against the packed baseline;
#  3. tools/cuda_check_moe.py with few cases: every MoE and dense kernel against its contract, and the
#     dense projections at T = 5 next to the HBM time of their weight bytes.
# Usage: OUT=dir bash tools/gpu_dense.sh. Logs and JSON land in $OUT; a summary is printed at the end.
# Exit 0 when every replay and the kernel check are exact.
. "$(dirname "$0")/gpu_lib.sh"
for w in packed expanded; do
  $S synth --preset tiny-moe-attn --tp 2 --verify-rows 2 --draft-rows 5 --draft-kind dspark --moe-weights $w \
    --seed 3 --out "$T/tiny-$w" -q >"$OUT/synth-tiny-attn-$w.log" 2>&1 || { echo "synth tiny-attn-$w failed"; rc_all=2; }
  replay "tiny-moe-attn-$w" "$T/tiny-$w"
done
$S synth --preset dsv41-draft-attn --tp 2 --verify-rows 2 --draft-rows 5 --draft-kind mtp1 --out "$T/dsv41" -q \
  >"$OUT/synth-dsv41-attn.log" 2>&1 || { echo "synth dsv41-attn failed"; rc_all=2; }
replay dsv41-attn-packed "$T/dsv41"
timeout 300 $S gate "$T/dsv41" --driver cuda --placement emulated --candidate projections=moe-expanded \
  --epochs 20 --changed 1 --reps 3 -q --out "$OUT/gate-dense-expanded.json" >"$OUT/gate-dense-expanded.log" 2>&1
rc=$?
summary+=("| gate dsv41-attn projections=moe-expanded | rc=$rc | $(grep -E 'PASS|FAIL|UNTIMED|verdict' "$OUT/gate-dense-expanded.log" | head -2 | tr '\n' ' ') |")
timeout 300 python3 tools/cuda_check_moe.py --cases 6 --reps 20 --rows 5 --no-torch --json "$OUT/moe-check.json" \
  >"$OUT/moe-check.log" 2>&1
rc=$?
[ $rc -eq 0 ] || rc_all=1
echo "| step | exit | result | |"; echo "|---|---|---|---|"
printf '%s\n' "${summary[@]}"
echo; echo "cuda_check_moe (rc=$rc):"; cat "$OUT/moe-check.log"
echo; echo "gate (dsv41-attn, packed baseline vs projections=moe-expanded):"; tail -25 "$OUT/gate-dense-expanded.log"
rm -rf "$T"
exit $rc_all
