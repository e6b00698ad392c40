#!/usr/bin/env bash
# Full-geometry capture on a CUDA host, one command: serve the transformers DeepSeek-V4 reference at
# DeepSeek-V4-Flash size (hidden 4096, 43 layers, hc 4, its attention shapes, $EXPERTS routed experts,
# MTP draft) over TP $TP ranks (one GPU per rank over NCCL where the host has them, else all ranks on
# GPU 0 over gloo), capture one draft + verify M=2 cycle, verify --infer, inspect, replay it on the cuda
# driver (70 graph + 16 changed epochs), gate it (--delete mhc bound), then synth the same geometry
# and replay that for the side-by-side time. Logs and JSON land under ${OUT:-out}/, the corpora in a
# fresh folder under /tmp. The last lines are a summary table.
# Usage: bash tools/gpu_capture_flash.sh        (EXPERTS=8 TP=4 EPOCHS=70 CHANGED=16 by default)
# Needs blake3, zstandard, transformers 5.24 and tokenizers 0.23 next to torch (the .whl/ folder).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
EXPERTS=${EXPERTS:-8}; TP=${TP:-4}; EPOCHS=${EPOCHS:-70}; CHANGED=${CHANGED:-16}
DEVICE=${DEVICE:-cuda}; DRIVER=${DRIVER:-cuda}; LAYERS=${LAYERS:-}   # empty: the preset's 43; plumbing check on a CPU: DEVICE=cpu DRIVER=cpu LAYERS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
S="python3 -m decoder_shell.cli"
W=$(mktemp -d /tmp/decoder-shell-flash.XXXXXX)
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
TOKEN="$W/control.token"
step() { local name=$1; shift; echo "== $name"; local t0=$SECONDS; timeout "${LIMIT:-240}" "$@" >"$OUT/$name.log" 2>&1
         local rc=$?; echo "rc=$rc ($((SECONDS - t0)) s)"; echo "$name $rc $((SECONDS - t0))" >>"$OUT/steps.txt"
         tail -n "${TAIL:-12}" "$OUT/$name.log"; }
jstep() { local name=$1; shift; echo "== $name"; local t0=$SECONDS; timeout "${LIMIT:-240}" "$@" >"$OUT/$name.json" 2>"$OUT/$name.log"
          local rc=$?; echo "rc=$rc ($((SECONDS - t0)) s)"; echo "$name $rc $((SECONDS - t0))" >>"$OUT/steps.txt"
          tail -n 5 "$OUT/$name.log"; }
: >"$OUT/steps.txt"
gpu() { command -v nvidia-smi >/dev/null && nvidia-smi "$@"; }
gpu --query-gpu=name,driver_version,memory.total --format=csv,noheader

echo "== serve (TP $TP, $EXPERTS routed experts, port $PORT)"
T0=$SECONDS
$S serve-reference --preset dsv4-flash --tp "$TP" --device "$DEVICE" --routed-experts "$EXPERTS" \
  ${LAYERS:+--layers "$LAYERS"} --port "$PORT" --token-file "$TOKEN" >"$OUT/serve.log" 2>&1 &
SVC=$!
stop_service() { if kill -0 "$SVC" 2>/dev/null; then kill -TERM "$SVC"; wait "$SVC"; fi; }
trap stop_service EXIT
until grep -q "^serving http" "$OUT/serve.log" 2>/dev/null; do
  if ! kill -0 "$SVC" 2>/dev/null || [ $((SECONDS - T0)) -gt 240 ]; then
    echo "service did not start:"; tail -n 30 "$OUT/serve.log"; exit 1
  fi
  sleep 1
done
echo "serve 0 $((SECONDS - T0))" >>"$OUT/steps.txt"
grep "^serving http" "$OUT/serve.log"
gpu --query-gpu=memory.used --format=csv,noheader | sed 's/^/GPU memory used while serving: /'

LIMIT=360 jstep capture $S capture --from-service "http://127.0.0.1:$PORT" --token-file "$TOKEN" --out "$W/capture" \
  --cycles 1 --ready-timeout 60 --timeout 300 --json
stop_service; trap - EXIT   # the GPU is the replay's alone from here

step verify $S verify "$W/capture" --infer
jstep inspect $S inspect "$W/capture" --json
step replay-capture $S replay "$W/capture" --driver "$DRIVER" --epochs "$EPOCHS" --changed "$CHANGED" \
  --json-out "$OUT/replay-capture.json" --plot "$OUT/replay-capture.png"
step gate-delete-mhc $S gate "$W/capture" --delete mhc --epochs 30 --changed 4 --reps 3 --driver "$DRIVER" \
  --out "$OUT/gate-delete-mhc.json"
step synth $S synth --preset dsv4-flash --tp "$TP" --verify-rows 2 --draft-rows 1 --out "$W/synth"
step replay-synth $S replay "$W/synth" --driver "$DRIVER" --epochs "$EPOCHS" --changed "$CHANGED" \
  --json-out "$OUT/replay-synth.json" --plot "$OUT/replay-synth.png"

python3 tools/capture_flash_table.py "$OUT"
