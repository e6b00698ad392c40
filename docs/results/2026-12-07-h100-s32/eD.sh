# call D (thirty-second session, right after C on the same H200; the default build, CL_SV_LANE2=4): tilelang, then the
# peers in the same run as the cluster cycle (its launch graph-timed: DECODER_SHELL_CUDA_PERSIST_TIMING=graph; the peers'
# and torch.compile's graph replays by events behind a held stream, torch_baseline.event_ms): TP4 M=1/2/4/8 with vLLM
# 0.33.0's TileLang mHC and torch.compile at M=2, then TP1 M=1/2 the same way; then the draft + verify replay through the CLI
S=$OUT/eD; mkdir -p $S
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .wB/*.whl > /tmp/pipB.log 2>&1 || { echo pip failed; tail -5 /tmp/pipB.log; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 DECODER_SHELL_CUDA_PERSIST_TIMING=graph
echo "pip $((SECONDS-t0))s"
timeout 170 python3 tools/bench_replay.py --rows 1 2 4 8 --epochs 30 --only-main --no-torch --persistent-cluster --vllm-src /tmp/vllm-py.tgz --vllm-paths tilelang --torch-compile 2 --json $S/tp4.json > $S/tp4.log 2>&1; echo "tp4 rc=$? $((SECONDS-t0))s"
timeout 90 python3 tools/bench_replay.py --tp 1 --rows 1 2 --epochs 30 --only-main --no-torch --persistent-cluster --vllm-src /tmp/vllm-py.tgz --vllm-paths tilelang --torch-compile 2 --json $S/tp1.json > $S/tp1.log 2>&1; echo "tp1 rc=$? $((SECONDS-t0))s"
python3 -m decoder_shell.cli synth --preset dsv4-flash --tp 4 --verify-rows 2 --draft-rows 1 --out /tmp/f4 > /tmp/synth.log 2>&1
timeout 30 python3 -m decoder_shell.cli replay /tmp/f4 --driver cuda --placement emulated --epochs 70 --changed 16 --cycle persistent-cluster > $S/dv-persistent-cluster.log 2>&1; echo "dv rc=$? $((SECONDS-t0))s"
for f in tp4 tp1; do grep "^| " $S/$f.log | grep -v "^| ---" | tail -14 | cut -c1-200; done
echo "dv: $(grep 'slowest rank' $S/dv-persistent-cluster.log | tail -1) $(tail -1 $S/dv-persistent-cluster.log | cut -c1-100)"
