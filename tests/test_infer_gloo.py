"""The inferred contract against REAL gloo all-reduces: R = 2..8, bf16 and fp32, sizes not divisible by R.

One spawn of 8 processes on loopback; a gloo subgroup of the first R ranks for each R. The contract is
inferred from a few 'captured' sizes (two small ones whose chunk boundaries tell ring layouts apart, two
capture-like ones), then must reproduce gloo on held-out sizes, bit for bit, on every rank.
"""


import blake3
import numpy as np
import pytest
import torch
import torch.distributed as dist

from decoder_shell.capture.tensors import to_numpy
from decoder_shell.contracts.allreduce import allreduce
from decoder_shell.corpus.infer import Collective, infer
from gloo_world import gather_from_ranks, subgroups

WORLD = 8
HELD_OUT = (1, 7, 1001, 65537, 262147)
DTYPES = (torch.bfloat16, torch.float32)


def fit_sizes(ranks):
    return (2 * ranks + 1, 4 * ranks + 3, 128, 4099)


def _input(ranks, n, dtype, rank):
    g = torch.Generator().manual_seed(((ranks * 1_000_003 + n) * 16 + rank) * 2 + DTYPES.index(dtype))
    mag = torch.pow(10.0, torch.randint(-3, 4, (n,), generator=g).float())
    return (torch.randn(n, generator=g) * mag).to(dtype)


def _worker(rank, port, queue):
    for ranks, group in subgroups(rank, port, WORLD):
        for n in fit_sizes(ranks) + HELD_OUT:
            for dtype in DTYPES:
                x = _input(ranks, n, dtype, rank)
                dist.all_reduce(x, group=group)
                out = to_numpy(x)
                queue.put((ranks, n, str(dtype), rank, blake3.blake3(out.tobytes()).hexdigest(),
                           out.tobytes() if rank == 0 else b""))
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def gloo_results():
    expected = sum(r * len(fit_sizes(r) + HELD_OUT) for r in range(2, WORLD + 1)) * len(DTYPES)
    results = {}
    for ranks, n, dtype, rank, digest, data in gather_from_ranks(_worker, WORLD, expected, join_timeout=60):
        entry = results.setdefault((ranks, n, dtype), {"digests": {}, "out": None})
        entry["digests"][rank] = digest
        if data:
            entry["out"] = data
    return results


def _collective(results, ranks, n, dtype):
    e = results[(ranks, n, str(dtype))]
    assert len(set(e["digests"].values())) == 1, "gloo gave ranks different bits"
    xs = [to_numpy(_input(ranks, n, dtype, r)) for r in range(ranks)]
    out = np.frombuffer(e["out"], dtype=xs[0].dtype)
    return Collective(f"R{ranks}.n{n}.{dtype}", tuple(xs), tuple(out for _ in range(ranks)))


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp32"])
@pytest.mark.parametrize("ranks", range(2, WORLD + 1))
def test_inferred_contract_reproduces_real_gloo(gloo_results, ranks, dtype):
    captured = [_collective(gloo_results, ranks, n, dtype) for n in fit_sizes(ranks)]
    found = infer(captured)
    assert found.found, found.describe()
    for n in HELD_OUT:
        c = _collective(gloo_results, ranks, n, dtype)
        got = allreduce(list(c.inputs), found.contract)
        bits = np.uint16 if got.dtype.itemsize == 2 else np.uint32
        bad = int(np.count_nonzero(got.view(bits) != c.outputs[0].view(bits)))
        assert bad == 0, f"{found.contract.describe()} differs from gloo on {bad} of {n} elements (R={ranks}, {dtype})"
