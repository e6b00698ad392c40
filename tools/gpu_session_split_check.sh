#!/usr/bin/env bash
# One call on a CUDA machine after the cuda driver's split by job: the GPU tests (exactness, one process
# per rank, plain vs programmatic edges, a planted compile error freeing its device memory), the kernel
# vs contract check (200 random cases, FMA build caught), and the replay benchmark of this tree next to a
# same-run baseline tree when BASE names one (e.g. a checkout of the commit before the split).
# Usage: [BASE=/path/to/old/checkout] bash tools/gpu_session_split_check.sh
set -u
export PYTHONUNBUFFERED=1
HERE=$(cd "$(dirname "$0")/.." && pwd)
rc=0
cd "$HERE"
echo "== GPU tests";  PYTHONPATH=$HERE python3 -m pytest -q tests/test_cuda.py tests/test_cuda_build.py || rc=1
echo "== kernels vs contracts"; PYTHONPATH=$HERE python3 tools/cuda_check.py --cases 200 || rc=1
for tree in "$HERE" ${BASE:+"$BASE"}; do
  echo "== replay benchmark: $tree"
  (cd "$tree" && PYTHONPATH=$tree python3 tools/bench_replay.py --rows 1 2 4 8 --no-torch) || rc=1
done
echo "== exit $rc"
exit $rc
