#!/usr/bin/env bash
# vLLM's fused RMSNorm collapse on the GPU (cuda driver, rmsnorm.cu after each hc_pre): the GPU test
# (dsv4-flash width and a width that is not a multiple of 1024, graph and eager launches), then
# dsv4-flash TP4 verify M=2 + draft M=1 with fused_norm replayed 70 graph + 16 changed epochs next to
# the same geometry without it, one line of result each. Usage: bash tools/gpu_fused_norm.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
S="python3 -m decoder_shell.cli"
python3 -m pytest -q tests/test_cuda.py -k fused_norm 2>&1 | tail -1
for norm in "" "--fused-norm"; do
  d=/tmp/fn${norm:+-fused}
  [ -d "$d" ] || $S synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 $norm --out "$d" >/dev/null
  $S replay "$d" --driver cuda --epochs 70 --changed 16 --json-out "$d.json" >"$d.log" 2>&1
  echo "fused_norm=${norm:+yes}${norm:-no} rc=$? $(grep -E 'EXACT|MISMATCH' "$d.log" | tail -1) \
$(python3 -c "import json; t=json.load(open('$d.json'))['timing']['cycle_ms']; print('cycle ms median %.3f p10 %.3f p90 %.3f' % (t['median'], t['p10'], t['p90']))" 2>/dev/null)"
done
