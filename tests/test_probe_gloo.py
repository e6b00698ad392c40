"""Probes against REAL gloo all-reduces: R = 2..8, bf16 and fp32, sizes not multiples of R, and fp32
messages of several MiB (above gloo's 1 MiB segment cap, where the uncapped ring contract is wrong).

One spawn of 8 processes on loopback, a gloo subgroup of the first R ranks for each R. The contract is
identified from the probe all-reduces alone (contracts/probe.py inputs, gloo's outputs) and must then
reproduce gloo, bit for bit on every element, on random data of every size.
"""


import ml_dtypes
import numpy as np
import pytest
import torch.distributed as dist

from decoder_shell.capture.tensors import to_numpy, to_torch
from decoder_shell.contracts.allreduce import RingContract, allreduce
from decoder_shell.contracts.probe import probe_input, probe_inputs
from decoder_shell.corpus.infer import Collective, consistent, infer
from gloo_world import gather_from_ranks, subgroups

WORLD = 8
DTYPES = {"bf16": ml_dtypes.bfloat16, "fp32": np.float32}
LARGE = {3: 3 * 2**20 // 4 * 3 + 5}  # fp32 elements: 9 MiB at R=3, above gloo's 2R MiB


def sizes(ranks, dtype):
    out = [2 * ranks + 1, 4 * ranks + 3, 4099]
    if dtype == "fp32" and ranks in LARGE:
        out.append(LARGE[ranks])
    return out


class _Kinds:
    """What runs at each size: both probes, and random data to check the identified contract on."""

    def __getitem__(self, key):
        dtype, n = key
        return ("order", "random") if n in LARGE.values() else ("order", "rounding", "random")


KINDS = _Kinds()


def _random(ranks, n, dtype, rank):
    rng = np.random.default_rng([ranks, n, rank, list(DTYPES).index(dtype)])
    return (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(DTYPES[dtype])


def _worker(rank, port, queue):
    for ranks, group in subgroups(rank, port, WORLD):
        for dtype in DTYPES:
            for n in sizes(ranks, dtype):
                for kind in KINDS[dtype, n]:
                    x = _random(ranks, n, dtype, rank) if kind == "random" else \
                        probe_input(ranks, rank, n, DTYPES[dtype], kind)
                    t = to_torch(x)
                    dist.all_reduce(t, group=group)
                    out = to_numpy(t)
                    queue.put((ranks, dtype, n, kind, rank, out.tobytes() if rank == 0 else out.tobytes()[:64]))
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def gloo():
    expected = sum(r * len(KINDS[d, n]) for r in range(2, WORLD + 1) for d in DTYPES for n in sizes(r, d))
    out = {}
    for ranks, dtype, n, kind, rank, data in gather_from_ranks(_worker, WORLD, expected, join_timeout=120):
        if rank == 0:
            out[(ranks, dtype, n, kind)] = np.frombuffer(data, dtype=DTYPES[dtype])
    return out


def _mismatches(got, want) -> int:
    bits = np.uint16 if got.dtype.itemsize == 2 else np.uint32
    return int(np.count_nonzero(got.view(bits) != want.view(bits)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ranks", range(2, WORLD + 1))
def test_probes_identify_gloo(gloo, ranks, dtype):
    probes = [Collective(f"{kind}.n{n}", tuple(probe_inputs(ranks, n, DTYPES[dtype], kind)),
                         (gloo[(ranks, dtype, n, kind)],) * ranks)
              for n in sizes(ranks, dtype) for kind in KINDS[dtype, n] if kind != "random"]
    found = infer(probes)
    assert found.found, found.describe()
    for n in sizes(ranks, dtype):
        xs = [_random(ranks, n, dtype, r) for r in range(ranks)]
        bad = _mismatches(allreduce(xs, found.contract), gloo[(ranks, dtype, n, "random")])
        assert bad == 0, f"{found.contract.describe()}: {bad} of {n} elements differ from gloo (R={ranks}, {dtype})"
    if dtype == "fp32" and ranks in LARGE:  # the cap decides: without it the large message folds otherwise
        uncapped = RingContract(**{**found.contract.to_json(), "max_chunk_bytes": 0})
        n = LARGE[ranks]
        assert found.contract.max_chunk_bytes, found.contract.describe()  # a segment cap (gloo: 1 MiB)
        large = next(p for p in probes if p.name == f"order.n{n}")
        assert _mismatches(allreduce(large.inputs, uncapped), gloo[(ranks, dtype, n, "order")]) > 0


def test_probes_decide_where_random_data_does_not(gloo):
    """At R=3 on a 7-element bf16 message, random data fits several behaviours; the probe fits one."""
    ranks, n = 3, 7
    rnd = Collective("random", tuple(_random(ranks, n, "bf16", r) for r in range(ranks)),
                     (gloo[(ranks, "bf16", n, "random")],) * ranks)
    prb = [Collective(kind, tuple(probe_inputs(ranks, n, ml_dtypes.bfloat16, kind)),
                      (gloo[(ranks, "bf16", n, kind)],) * ranks) for kind in ("order", "rounding")]
    assert len(consistent([rnd])) > 1
    assert len(consistent([rnd, *prb])) == 1
