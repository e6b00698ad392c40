"""Bit patterns and their distances: what "exact" means, element by element.

Two elements are equal when their bit patterns are (a NaN equals only the same NaN bits); the
distance between two floats of one dtype is their distance in units in the last place, measured
on integers that order like the floats. Every comparison in the project (replay, gate, self-check,
verify, the accuracy measures) uses these.
"""

from __future__ import annotations

import numpy as np

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(_UINT[a.dtype.itemsize])


def mismatches(got: np.ndarray, want: np.ndarray) -> int:
    """Number of elements whose bit patterns differ."""
    return int(np.count_nonzero(bits(got) != bits(want)))


def ordered(a: np.ndarray) -> np.ndarray:
    """Map float bit patterns to integers whose order and distance are the floats' (ulp distance)."""
    b = bits(a).astype(np.int64)
    width = a.dtype.itemsize * 8
    sign = np.int64(1) << (width - 1)
    return np.where(b & sign, -(b & (sign - 1)), b)


def ulp(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise distance in units in the last place (same dtype)."""
    return np.abs(ordered(a) - ordered(b))


def max_ulp(got: np.ndarray, want: np.ndarray) -> float:
    """Largest distance in units in the last place; inf where a NaN is involved and bits differ."""
    if got.size == 0:
        return 0.0
    diff = bits(got) != bits(want)
    if not diff.any():
        return 0.0
    if np.isnan(got.astype(np.float32)[diff]).any() or np.isnan(want.astype(np.float32)[diff]).any():
        return float("inf")
    return float(ulp(got, want).max())
