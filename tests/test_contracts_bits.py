"""contracts/bits.py: what "exact" and "n ulp apart" mean, as properties over every bit pattern."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from decoder_shell.contracts.bits import bits, max_ulp, mismatches, ordered, ulp
from decoder_shell.contracts.numerics import BF16, F32

PATTERNS = {BF16: st.integers(0, 0xFFFF), F32: st.integers(0, 0xFFFFFFFF)}
UINT = {BF16: np.uint16, F32: np.uint32}


def floats(dtype, n=None):
    pats = st.lists(PATTERNS[dtype], min_size=1, max_size=64) if n is None else st.lists(PATTERNS[dtype], min_size=n,
                                                                                          max_size=n)
    return pats.map(lambda p: np.array(p, dtype=UINT[dtype]).view(dtype))


def finite(a):
    """Not NaN (infinities included), tested on the values themselves: casting a NaN pattern warns."""
    return ~np.isnan(a)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([BF16, F32]).flatmap(lambda d: st.tuples(floats(d, 32), floats(d, 32))))
def test_ordered_orders_like_the_values(pair):
    a, b = pair
    ok = finite(a) & finite(b)
    av, bv = a[ok].astype(np.float64), b[ok].astype(np.float64)
    oa, ob = ordered(a)[ok], ordered(b)[ok]
    assert np.array_equal(av < bv, oa < ob)
    assert np.array_equal(av == bv, oa == ob)  # +0 and -0 are equal values: both map to 0


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([BF16, F32]).flatmap(lambda d: st.tuples(floats(d, 16), floats(d, 16))))
def test_ulp_is_a_distance(pair):
    a, b = pair
    assert np.array_equal(ulp(a, b), ulp(b, a))
    assert not ulp(a, a).any()
    assert mismatches(a, a) == 0
    assert mismatches(a, b) == int(np.count_nonzero(bits(a) != bits(b)))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([BF16, F32]).flatmap(floats))
def test_next_representable_value_is_one_ulp_away(a):
    a = a[finite(a)]
    a = a[np.abs(a.astype(np.float64)) < np.finfo(np.float32).max / 2]
    if not a.size:
        return
    # the neighbouring bit pattern: one place up for +x and -0, one place down (towards zero) for -x
    step = bits(a).astype(np.int64) + np.where(a.astype(np.float64) >= 0, 1, -1)
    b = step.astype(UINT[a.dtype]).view(a.dtype)
    keep = finite(b)
    assert (ulp(a[keep], b[keep]) == 1).all()
    assert max_ulp(a[keep], b[keep]) == (1.0 if keep.any() else 0.0)


def test_a_nan_that_differs_is_infinitely_far():
    a = np.array([1.0, np.nan], dtype=F32)
    b = np.array([1.0, 2.0], dtype=F32)
    assert max_ulp(a, b) == float("inf") and max_ulp(a, a.copy()) == 0.0
    assert mismatches(a, b) == 1
