"""Order-revealing probe inputs: an all-reduce of these tells which ranks it folded after which.

For element e two ranks (a, b) hold +2^60 and -2^60, every other rank r holds 2^r (r < 8, so any sum
of them is exact in bf16 and fp32). Folding left to right, whatever precedes the second big value is
absorbed (2^60 + 255 rounds to 2^60 in both dtypes, hop or fp32 accumulation) and the two big values
cancel exactly, so the result is the sum of 2^r over the ranks folded after both a and b: a bit set of
the fold order. The pair (a, b) rotates with e, so within a chunk (one fold order) consecutive
elements ask about different pairs: contracts that fold whole chunks differently (ring direction,
start offset, chunks per rank, accumulation) give different bits on the probe. Two chunkings that move
a chunk boundary by a few elements may agree on every probe element too (a single element answers for
one pair only); corpus.infer.consistent then lists both, and either reproduces that message size.
With two ranks every order is the same arithmetic (a + b commutes) and the probe is all zeros.

Those sums are exact, so they cannot tell where rounding happens; the "rounding" probe does: rank
e mod R holds 1, every other rank 2^-8. A ring that rounds to bf16 after every hop loses each 2^-8
added after the 1 (1 + 2^-8 is a tie that rounds to 1), one that accumulates in fp32 keeps them all.
Probe values are a pure function of (kind, ranks, rank, n): nothing but outputs needs storing.
"""

from __future__ import annotations

import numpy as np

from .numerics import BF16, F32

BIG = np.float32(2.0**60)
MAX_RANKS = 8  # 2^r for r < 8: sums up to 255, exact in bf16's 8 significant bits


def pairs(ranks: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The two ranks holding +-2^60 for each element: a = e mod R, b = a + 1 + (e div R) mod (R-1)."""
    e = np.arange(n)
    a = e % ranks
    b = (a + 1 + (e // ranks) % max(ranks - 1, 1)) % ranks
    return a, b


KINDS = ("order", "rounding")


def probe_input(ranks: int, rank: int, n: int, dtype, kind: str = "order") -> np.ndarray:
    """Rank `rank`'s probe tensor of n elements (bfloat16 or float32)."""
    if not 2 <= ranks <= MAX_RANKS:
        raise ValueError(f"probes reveal the order of 2 to {MAX_RANKS} ranks, not {ranks}")
    dtype = np.dtype(dtype)
    if dtype not in (BF16, F32):
        raise ValueError(f"probes are bfloat16 or float32, not {dtype}")
    if kind == "rounding":
        x = np.full(n, np.float32(2.0**-8), dtype=F32)
        x[np.arange(n) % ranks == rank] = np.float32(1.0)
        return x.astype(dtype)
    if kind != "order":
        raise ValueError(f"probe kind must be one of {KINDS}, not {kind!r}")
    a, b = pairs(ranks, n)
    x = np.full(n, np.float32(2.0**rank), dtype=F32)
    x[a == rank] = BIG
    x[b == rank] = -BIG
    return x.astype(dtype)


def probe_inputs(ranks: int, n: int, dtype, kind: str = "order") -> list[np.ndarray]:
    return [probe_input(ranks, r, n, dtype, kind) for r in range(ranks)]
