"""Bit-for-bit comparison of a replay's outputs (the element rules live in contracts/bits.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ..contracts.bits import bits, max_ulp, mismatches, ordered, ulp  # noqa: F401  (the one definition)


@dataclass
class Comparison:
    """Every output of every rank against its expected value."""

    per_rank: list[int]  # mismatching elements per rank
    by_op_rank: dict[str, list[int]]  # op -> mismatching elements per rank (ops with any)
    elements: int  # elements compared
    first: str | None  # the first mismatching output, named

    @property
    def by_op(self) -> dict[str, int]:
        return {op: sum(v) for op, v in self.by_op_rank.items()}


def compare_outputs(session, cycle, expected, skip=frozenset()) -> Comparison:
    """Read each rank's outputs (one round trip per rank) and count the elements whose bits differ."""
    per_rank = [0] * cycle.ranks
    by_op: dict[str, list[int]] = {}
    first, elements = None, 0
    outputs = [b for b in cycle.outputs() if b.id not in skip]
    for r in range(cycle.ranks):
        for b, got in zip(outputs, session.read_many(r, [b.id for b in outputs])):
            elements += got.size
            n = mismatches(got, expected[r][b.id])
            if n:
                per_rank[r] += n
                by_op.setdefault(b.boundary.op, [0] * cycle.ranks)[r] += n
                first = first or f"rank {r} {b.name} ({n} element{'s' if n > 1 else ''})"
    return Comparison(per_rank, by_op, elements, first)
