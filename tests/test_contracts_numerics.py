"""numerics: lane sums, the portable exp and sigmoid, bf16 rounding -- bit-for-bit against naive
scalar references that follow the documented order (tests/conftest.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from decoder_shell.contracts import numerics
from decoder_shell.contracts.numerics import BF16, LANES, lane_sum, pexp, psigmoid, seq_sum, to_bf16

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
# sums of these cannot overflow for the lengths used here, so every comparison is of finite values
moderate32 = st.floats(min_value=-2.0 ** 100, max_value=2.0 ** 100, width=32, allow_nan=False)
pow2_lanes = st.sampled_from([1, 2, 4, 8, 16, 32, 64])


def u32(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def vec(n, elements=moderate32):
    return hnp.arrays(np.float32, n, elements=elements)


# --- lane_sum ----------------------------------------------------------------------------------
@FAST
@given(data=st.data(), lanes=pow2_lanes, n=st.integers(0, 300))
def test_lane_sum_matches_naive_lane_order(naive, data, lanes, n):
    x = data.draw(vec(n))
    got = lane_sum(x, lanes=lanes)
    want = naive.lane_sum(list(x), lanes)
    assert got.dtype == np.float32 and got.shape == ()
    assert u32(got) == u32(want)


@SLOW
@given(data=st.data(), n=st.integers(1, 3000))
def test_lane_sum_default_lanes_matches_naive(naive, data, n):
    """The production width (LANES=1024), with lengths below, at and above one full row of lanes."""
    assert LANES == 1024
    x = data.draw(vec(n))
    assert u32(lane_sum(x)) == u32(naive.lane_sum(list(x), 1024))


@FAST
@given(data=st.data(), lanes=pow2_lanes, rows=st.integers(1, 4), n=st.integers(0, 80))
def test_lane_sum_batches_rows_independently(naive, data, lanes, rows, n):
    x = data.draw(hnp.arrays(np.float32, (rows, n), elements=moderate32))
    got = lane_sum(x, lanes=lanes)
    assert got.shape == (rows,)
    for r in range(rows):
        assert u32(got[r]) == u32(naive.lane_sum(list(x[r]), lanes))


def test_lane_sum_order_is_observable():
    """The lane order is not a plain left-to-right sum: pick values where the two differ."""
    x = np.array([1e8, 1.0, -1e8, 1.0], dtype=np.float32)
    # lanes=2: lane0 = 1e8 + -1e8 = 0, lane1 = 1 + 1 = 2 -> 2; left to right: ((1e8+1)-1e8)+1 = 1
    assert lane_sum(x, lanes=2) == np.float32(2.0)
    assert seq_sum(x, axis=0) == np.float32(1.0)
    assert lane_sum(x, lanes=1) == np.float32(1.0)


def test_lane_sum_of_negative_zeros_is_positive_zero():
    """Accumulators start at +0.0, so even an all -0.0 input sums to +0.0 (documented)."""
    x = np.full(5, -0.0, dtype=np.float32)
    assert u32(lane_sum(x, lanes=4)) == 0
    assert u32(lane_sum(np.zeros(0, np.float32))) == 0


def test_lane_sum_rejects_or_sums_correctly_with_non_power_of_two_lanes():
    """The adjacent-pair tree needs a power-of-two lane count: anything else must be refused (or
    summed correctly), never silently count a lane twice (lane_sum(ones(3), lanes=3) == 3 or raise)."""
    try:
        got = lane_sum(np.ones(3, dtype=np.float32), lanes=3)
    except ValueError:
        return
    assert got == np.float32(3.0)


# --- seq_sum -----------------------------------------------------------------------------------
@FAST
@given(data=st.data(), k=st.integers(1, 6), d=st.integers(1, 8))
def test_seq_sum_left_to_right(naive, data, k, d):
    x = data.draw(hnp.arrays(np.float32, (k, d), elements=moderate32))
    got = seq_sum(x, axis=0)
    for j in range(d):
        assert u32(got[j]) == u32(naive.seq([x[i, j] for i in range(k)]))


# --- pexp / psigmoid ---------------------------------------------------------------------------
def test_documented_constants(naive):
    """The constants the docs state are the ones the code uses (bit for bit)."""
    c = naive.consts
    for name, want in [("EXP_LO", c.EXP_LO), ("EXP_HI", c.EXP_HI), ("LOG2E", c.LOG2E),
                       ("ROUND_MAGIC", c.MAGIC), ("LN2_HI", c.LN2_HI), ("LN2_LO", c.LN2_LO)]:
        assert u32(getattr(numerics, name)) == u32(want), name
    assert [int(u32(v)) for v in numerics.EXP_POLY] == [int(u32(v)) for v in c.POLY]
    # n * LN2_HI is exact for |n| <= 128: LN2_HI has at most 9 significant bits
    m, _ = math.frexp(float(c.LN2_HI))
    assert (m * 2 ** 9).is_integer()


@FAST
@given(x=hnp.arrays(np.float32, st.integers(1, 64), elements=finite32))
def test_pexp_matches_naive_full_range(naive, x):
    got = pexp(x)
    assert got.dtype == np.float32
    want = np.array([naive.pexp(v) for v in x], dtype=np.float32)
    assert (u32(got) == u32(want)).all()


@FAST
@given(x=hnp.arrays(np.float32, st.integers(1, 64),
                    elements=st.floats(-90.0, 90.0, width=32, allow_nan=False)))
def test_pexp_matches_naive_in_range(naive, x):
    want = np.array([naive.pexp(v) for v in x], dtype=np.float32)
    assert (u32(pexp(x)) == u32(want)).all()


def test_pexp_special_values(naive):
    """Clamping uses fminf/fmaxf semantics: +-inf clamp to the range ends, a NaN input is replaced
    by the bound (fminf(NaN, 88) = 88), so pexp never returns NaN or inf."""
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 88.0, -87.0, 1e-45, -1e-45], dtype=np.float32)
    got = pexp(x)
    want = np.array([naive.pexp(v) for v in x], dtype=np.float32)
    assert (u32(got) == u32(want)).all()
    assert np.isfinite(got).all()
    assert got[3] == 1.0 and got[4] == 1.0
    assert got[0] == pexp(np.float32(88.0)) and got[2] == pexp(np.float32(88.0))
    assert got[1] == pexp(np.float32(-87.0))


@FAST
@given(payload=st.integers(1, 2**23 - 1), sign=st.integers(0, 1), n=st.integers(1, 64), data=st.data())
def test_pexp_of_any_nan_anywhere_in_an_array_is_the_upper_bound(payload, sign, n, data):
    """Every NaN, quiet or signaling, of either sign, at any position of an array of any length, clamps to 88
    as fminf does: the contract's bits must not depend on where in an array an element sits."""
    at = data.draw(st.integers(0, n - 1))
    x = np.zeros(n, np.uint32)
    x[at] = sign << 31 | 0x7F800000 | payload
    got = pexp(x.view(np.float32))
    assert u32(got[at]) == u32(pexp(np.float32(88.0)))


def test_pexp_exhaustive_sample_matches_naive(naive):
    """Every 997th fp32 bit pattern in [-88, 89]: a deterministic sweep of the whole range."""
    lo, hi = np.float32(-88.0), np.float32(89.0)
    pos = np.arange(0, int(u32(hi)), 997 * 64, dtype=np.uint32).view(np.float32)
    neg = np.arange(0x80000000, int(u32(lo)), 997 * 64, dtype=np.uint32).view(np.float32)
    x = np.concatenate([pos, neg])
    got = pexp(x)
    want = np.array([naive.pexp(v) for v in x], dtype=np.float32)
    assert (u32(got) == u32(want)).all()


def test_pexp_accuracy_vs_libm():
    """Accuracy (a tolerance test, not exactness): within 2 ulp of the correctly rounded exp wherever
    the result is normal."""
    x = np.linspace(-87, 88, 400_001, dtype=np.float32)
    got = pexp(x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    normal = ref >= np.finfo(np.float32).tiny
    ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
    err = np.abs(got - ref)[normal] / ulp[normal]
    assert err.max() <= 2.0, err.max()


@FAST
@given(z=hnp.arrays(np.float32, st.integers(1, 64), elements=finite32))
def test_psigmoid_matches_naive(naive, z):
    got = psigmoid(z)
    want = np.array([naive.psigmoid(v) for v in z], dtype=np.float32)
    assert (u32(got) == u32(want)).all()
    assert ((got >= 0) & (got <= 1)).all()


def test_psigmoid_accuracy():
    z = np.linspace(-40, 40, 100_001, dtype=np.float32)
    ref = 1.0 / (1.0 + np.exp(-z.astype(np.float64)))
    got = psigmoid(z).astype(np.float64)
    assert np.max(np.abs(got - ref) / ref) < 4e-7


# --- bf16 rounding -----------------------------------------------------------------------------
@FAST
@given(x=hnp.arrays(np.float32, st.integers(1, 64), elements=st.floats(width=32)))
def test_to_bf16_round_to_nearest_even(naive, x):
    got = to_bf16(x)
    assert got.dtype == BF16
    want = np.array([naive.bf16(v) for v in x], dtype=np.uint16)
    assert (got.view(np.uint16) == want).all()


def test_to_bf16_ties_go_to_even():
    # 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to the even mantissa (1.0)
    t = np.array([1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -(1.0 + 2.0 ** -8)], dtype=np.float32)
    assert list(to_bf16(t).astype(np.float32)) == [1.0, 1.015625, -1.0]
    big = np.array([np.finfo(np.float32).max], dtype=np.float32)
    assert np.isinf(to_bf16(big).astype(np.float32)).all()


@pytest.mark.parametrize("bits", [0x00000001, 0x007FFFFF, 0x00008000, 0x00018000, 0x80000000])
def test_to_bf16_subnormals_and_signed_zero(naive, bits):
    x = np.array([bits], dtype=np.uint32).view(np.float32)
    assert to_bf16(x).view(np.uint16)[0] == naive.bf16(x[0])


@FAST
@given(x=hnp.arrays(np.float32, st.integers(1, 16), elements=finite32))
def test_pexp_elementwise_shape_independent(x):
    """An element's result does not depend on its neighbours or the array shape (a GPU thread
    computes each element alone)."""
    assume(x.size > 1)
    whole = pexp(x)
    for i in range(x.size):
        assert u32(pexp(x[i:i + 1]))[0] == u32(whole)[i]
