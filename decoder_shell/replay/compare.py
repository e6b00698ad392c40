"""Bit-for-bit comparison of a replay's outputs (the element rules live in contracts/bits.py)."""

from __future__ import annotations

from ..contracts.bits import bits, max_ulp, mismatches, ordered, ulp  # noqa: F401  (the one definition)
