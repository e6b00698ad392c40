# call 4: when each scheduler's first warp (warps 0-3: chain groups 0 and 1 of both lane halves) starts and ends
# its dot products (CL_WARP_A=2 / 1, diagnosis builds: stamps 11-14 are warps 0-3, printed under the warp
# stamps' names "last warp after C" (warp 0), "last warp after A" (1), "last warp at the end" (2), "first warp
# after C" (3)), TP4 M=2 and M=8
S=$OUT/e4; mkdir -p $S /tmp/e4
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/e4/pip.log 2>&1 || { echo pip failed; exit; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for v in 2 1; do
  DECODER_SHELL_CUDA_DEFINES="CL_WARP_A=$v" timeout 100 python3 tools/cluster_check.py --cases 0 --profile-rows 2 8 --json /tmp/e4/warpa-$v.json > /tmp/e4/warpa-$v.log 2>&1
  echo "warpa $v rc=$? $((SECONDS-t0))s"
done
tar czf $S/logs.tgz -C /tmp e4
for v in 2 1; do echo "== CL_WARP_A=$v"; grep "^| TP4 M=[28] |\|^| TP4 M=[28] warps" /tmp/e4/warpa-$v.log | cut -c1-560; done
