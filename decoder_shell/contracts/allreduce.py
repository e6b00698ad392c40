"""Ring all-reduce contract: a parametric family of exact summation orders (DESIGN.md 4).

An all-reduce of R per-rank tensors of N elements is defined, per element, by the order in which the
R ranks' values are folded: acc = x[o0]; acc = acc + x[o1]; ... The family fixes that order by

- segments:      the flat tensor is cut into `segments` contiguous pieces (ceil size), each reduced
                 as an independent collective (a wide collective run as several narrower ones);
- chunking:      within a piece of n elements, `chunks = round_up(max(ceil(n / per),
                 chunks_per_rank * R), R)` chunks of ceil(n / chunks) elements (the last ones may be
                 short or empty), where per = max(1, max_chunk_bytes // itemsize) is the chunk bound
                 rounded down to whole elements (as gloo rounds its maximum segment size); chunk c
                 belongs to owner rank c // (chunks / R);
- order:         chunk c is folded starting at rank (owner + offset) mod R, stepping by `direction`
                 (+1 or -1) around the ring;
- accumulation:  "hop" rounds to the data dtype after every addition (a ring that sends partials in
                 the data dtype); "fp32" accumulates in fp32 and rounds once at the end.

Every rank ends with identical bits. gloo's ring, for example, is chunks_per_rank=2, offset=-1,
direction=-1, accumulation="hop" (see docs/CONTRACTS.md; the inference in corpus.infer finds it from
real captures rather than trusting this note).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .numerics import BF16, F32


@dataclass(frozen=True)
class RingContract:
    chunks_per_rank: int = 1
    max_chunk_bytes: int = 0  # 0: unbounded
    offset: int = 0
    direction: int = 1
    accumulation: str = "hop"  # "hop" | "fp32"
    segments: int = 1

    def __post_init__(self):
        if self.chunks_per_rank < 1 or self.segments < 1 or self.max_chunk_bytes < 0:
            raise ValueError(f"invalid ring contract {self}")
        if self.direction not in (1, -1):
            raise ValueError("ring direction must be +1 or -1")
        if self.accumulation not in ("hop", "fp32"):
            raise ValueError("accumulation must be 'hop' or 'fp32'")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "RingContract":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)

    def describe(self) -> str:
        bound = f", max {self.max_chunk_bytes} B/chunk" if self.max_chunk_bytes else ""
        return (f"ring(chunks/rank={self.chunks_per_rank}{bound}, start=owner{self.offset:+d}, "
                f"dir={self.direction:+d}, acc={self.accumulation}, segments={self.segments})")


def _piece_bounds(n: int, pieces: int) -> np.ndarray:
    size = -(-n // pieces) if n else 0
    return np.minimum(np.arange(pieces + 1) * size, n)


def rank_order(contract: RingContract, n: int, ranks: int, itemsize: int) -> np.ndarray:
    """The fold order for every element: int array [ranks, n], row t = rank added at step t."""
    order = np.empty((ranks, n), dtype=np.int64)
    seg = _piece_bounds(n, contract.segments)
    for s in range(contract.segments):
        lo, hi = int(seg[s]), int(seg[s + 1])
        m = hi - lo
        if m == 0:
            continue
        chunks = max(contract.chunks_per_rank * ranks, 1)
        if contract.max_chunk_bytes:
            per = max(1, contract.max_chunk_bytes // itemsize)
            chunks = max(chunks, -(-m // per))
        chunks = -(-chunks // ranks) * ranks
        size = -(-m // chunks)
        chunk = np.arange(m) // size
        owner = chunk // (chunks // ranks)
        start = (owner + contract.offset) % ranks
        steps = np.arange(ranks)[:, None] * contract.direction
        order[:, lo:hi] = (start[None, :] + steps) % ranks
    return order


def allreduce(inputs, contract: RingContract) -> np.ndarray:
    """All-reduce a list of R same-shape tensors (bf16 or fp32); returns the result every rank holds."""
    xs = [np.asarray(x) for x in inputs]
    if not xs:
        raise ValueError("allreduce needs at least one rank")
    shape, dtype = xs[0].shape, xs[0].dtype
    if dtype not in (BF16, F32):
        raise ValueError(f"allreduce supports bfloat16 and float32, not {dtype}")
    if any(x.shape != shape or x.dtype != dtype for x in xs):
        raise ValueError("allreduce inputs differ in shape or dtype across ranks")
    ranks = len(xs)
    flat = np.stack([x.reshape(-1) for x in xs]).astype(F32)
    n = flat.shape[1]
    order = rank_order(contract, n, ranks, dtype.itemsize)
    cols = np.arange(n)
    hop = contract.accumulation == "hop" and dtype == BF16
    acc = flat[order[0], cols]
    for t in range(1, ranks):
        acc = acc + flat[order[t], cols]
        if hop:
            acc = acc.astype(BF16).astype(F32)
    return acc.astype(dtype).reshape(shape)
