#!/usr/bin/env bash
# The exact-official MoE combine on the cuda driver, one command on one GPU (docs/MOE.md, docs/GATE.md):
#  1. replay of tiny-moe corpora in both combine modes (TP2 and TP4 emulated, DSpark 3 stages, T=5) and of
#     the official one with one process per rank (TP2 needs 2 GPUs; skipped with fewer): every output of
#     every rank bit-exact, graph and changed epochs;
#  2. a dsv41-draft official corpus (TP2, MTP1, T=5, packed): replay exact, then the gate candidate
#     combine=fused on it: mismatching elements per rank against the official outputs, the largest
#     difference in bf16 ulp, and the time the fused chain saves per cycle (exit 1 expected: a different
#     contract that differs is a FAIL, never "exact");
#  3. tools/cuda_check_moe.py with few cases (it checks moe_combine_official against its contract).
# Usage: OUT=dir bash tools/gpu_moe_combine.sh    Logs and JSON land in $OUT; a summary table is printed.
# Exit 0 when every replay and the kernel check are exact and the gate ran (whatever its verdict).
. "$(dirname "$0")/gpu_lib.sh"
for tp in 2 4; do
  for mode in official fused; do
    $S synth --preset tiny-moe --tp $tp --verify-rows 2 --draft-rows 5 --draft-kind dspark --moe-combine $mode \
      --seed 3 --out "$T/tiny-$mode-tp$tp" -q >"$OUT/synth-tiny-$mode-tp$tp.log" 2>&1 || { echo "synth failed"; rc_all=2; }
    replay "tiny-$mode-tp$tp" "$T/tiny-$mode-tp$tp"
  done
done
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
  replay "tiny-official-tp2-processes" "$T/tiny-official-tp2" processes
fi
timeout 300 $S gate "$T/tiny-official-tp2" --driver cuda --placement emulated --candidate combine=fused \
  --epochs 20 --changed 2 --reps 3 -q --out "$OUT/gate-tiny-combine-fused.json" >"$OUT/gate-tiny-combine-fused.log" 2>&1
summary+=("| gate tiny-moe TP2 combine=fused | rc=$? | $(grep -E '^(PASS|FAIL|UNTIMED)' "$OUT/gate-tiny-combine-fused.log" | head -1 | cut -c1-150) |")
$S synth --preset dsv41-draft --tp 2 --verify-rows 2 --draft-rows 5 --draft-kind mtp1 --moe-combine official \
  --out "$T/dsv41-official" -q >"$OUT/synth-dsv41-official.log" 2>&1 || { echo "synth dsv41 failed"; rc_all=2; }
replay dsv41-official "$T/dsv41-official"
timeout 300 $S gate "$T/dsv41-official" --driver cuda --placement emulated --candidate combine=fused \
  --epochs 20 --changed 1 --reps 3 -q --out "$OUT/gate-dsv41-combine-fused.json" >"$OUT/gate-dsv41-combine-fused.log" 2>&1
rc=$?
[ $rc -le 1 ] || rc_all=1
summary+=("| gate dsv41 combine=fused | rc=$rc | $(grep -E '^(PASS|FAIL|UNTIMED)' "$OUT/gate-dsv41-combine-fused.log" | head -1 | cut -c1-150) |")
timeout 300 python3 tools/cuda_check_moe.py --cases 6 --reps 20 --no-torch --json "$OUT/moe-check.json" \
  >"$OUT/moe-check.log" 2>&1
rc=$?
[ $rc -eq 0 ] || rc_all=1
echo "| step | exit | result | |"; echo "|---|---|---|---|"
printf '%s\n' "${summary[@]}"
echo; echo "cuda_check_moe (rc=$rc):"; grep -iE "combine|exact|mismatch" "$OUT/moe-check.log" | head -20
for f in "$OUT"/gate-*-combine-fused.json; do
  [ -f "$f" ] && python3 - "$f" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
c = v["exactness"]["candidate"]
per = [sum(c[k]["per_rank"][r] for k in ("graph", "changed")) for r in range(len(c["graph"]["per_rank"]))]
print(f"{sys.argv[1]}: {v['verdict']} / {v['exactness_verdict']}; mismatching elements per rank {per}; "
      f"largest diff per rank at the first combine {c.get('max_ulp_first_per_rank')}, over all "
      f"{c.get('max_ulp_per_rank')} bf16 ulp; saved ms/cycle median "
      f"{v['saved_ms']['median']:.4f}, conservative {v['saved_ms']['conservative']:.4f}")
PY
done
rm -rf "$T"
exit $rc_all
