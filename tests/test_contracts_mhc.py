"""mHC contracts and RMSNorm, bit for bit against naive scalar references of the documented order.

Shapes: M rows (1..3), HC streams (1..4 where the function takes HC from its inputs; the model uses
4), hidden D small (1..40) so the scalar references stay fast, plus a few wide cases where the
1024-lane sums hold several elements per lane."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from decoder_shell.contracts.mhc import (MhcParams, collapse, mhc_head_collapse, mhc_mixes, mhc_post, mhc_post_head,
                                         mhc_post_pre, mhc_pre, mhc_split, sinkhorn)
from decoder_shell.contracts.numerics import BF16, F32
from decoder_shell.contracts.rmsnorm import rmsnorm

SET = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                      HealthCheck.data_too_large])
FEW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                     HealthCheck.data_too_large])

def fl(lo, hi):
    """fp32 values in [lo, hi] (bounds rounded to fp32 first)."""
    return st.floats(float(np.float32(lo)), float(np.float32(hi)), width=32)


hidden = fl(-8.0, 8.0) | st.sampled_from([0.0, -0.0, float(np.float32(1e-30)), -3e3, 6e4])
weights = fl(-2.0, 2.0)
logits_el = fl(-60.0, 60.0) | st.sampled_from([0.0, -0.0, 100.0, -100.0])
params = st.builds(MhcParams, hc_eps=st.sampled_from([1e-6, 1e-3, 0.0]),
                   norm_eps=st.sampled_from([1e-6, 1e-2]), sinkhorn_iters=st.integers(1, 20))
DSV4 = MhcParams()


def u(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def arr(shape, elements, dtype=np.float32):
    return hnp.arrays(np.float32, shape, elements=elements).map(lambda a: a.astype(dtype))


def f32_bits(values):
    return np.array(values, dtype=np.float32).view(np.uint32)


def rows_of(streams_bf16):
    """[M, HC, D] bf16 -> nested lists of fp32 values, [m][h][d]."""
    s = np.asarray(streams_bf16, dtype=np.float32)
    return [[list(s[m, h]) for h in range(s.shape[1])] for m in range(s.shape[0])]


@st.composite
def mhc_case(draw, head=False, max_d=40):
    m, hc, d = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, max_d))
    o = hc if head else (2 + hc) * hc
    fn = draw(arr((o, hc * d), weights))
    base = draw(arr((o,), fl(-3.0, 3.0)))
    scale = draw(arr((1 if head else 3,), fl(0.05, 2.0)))
    return m, hc, d, fn, base, scale


@st.composite
def carried(draw, m, hc, d):
    """What an hc_post consumes: x (the reduced sub-block output), residual streams, post, comb."""
    xdtype = draw(st.sampled_from([BF16, F32]))
    x = draw(arr((m, d), hidden, xdtype))
    residual = draw(arr((m, hc, d), hidden, BF16))
    post = draw(arr((m, hc), fl(0.0, 2.0)))
    comb = draw(arr((m, hc, hc), fl(0.0, 1.0)))
    return x, residual, post, comb


# --- mixes -------------------------------------------------------------------------------------
@SET
@given(data=st.data(), m=st.integers(1, 3), n=st.integers(1, 160), o=st.integers(1, 24),
       eps=st.sampled_from([1e-6, 1e-2]))
def test_mixes_matches_naive(naive, data, m, n, o, eps):
    streams = data.draw(arr((m, 1, n), hidden, BF16))
    fn = data.draw(arr((o, n), weights))
    got = mhc_mixes(streams, fn, eps)
    assert got.dtype == F32 and got.shape == (m, o)
    for r in range(m):
        want = naive.mixes_row(list(streams[r].astype(np.float32).reshape(-1)), fn, eps)
        assert (u(got[r]) == f32_bits(want)).all()


@FEW
@given(data=st.data(), d=st.integers(257, 600))
def test_mixes_wide_several_elements_per_lane(naive, data, d):
    """HC*D > 1024: each of the 1024 lanes sums several strided elements before the tree."""
    streams = data.draw(arr((1, 4, d), hidden, BF16))
    fn = data.draw(arr((3, 4 * d), weights))
    got = mhc_mixes(streams, fn, 1e-6)
    want = naive.mixes_row(list(streams[0].astype(np.float32).reshape(-1)), fn, 1e-6)
    assert (u(got[0]) == f32_bits(want)).all()


def test_mixes_rejects_mismatched_projection():
    with pytest.raises(ValueError):
        mhc_mixes(np.zeros((1, 4, 8), BF16), np.zeros((24, 31), F32), 1e-6)


# --- split and Sinkhorn ------------------------------------------------------------------------
@SET
@given(data=st.data(), m=st.integers(1, 3), hc=st.integers(1, 4), p=params)
def test_sinkhorn_matches_naive(naive, data, m, hc, p):
    logits = data.draw(arr((m, hc, hc), logits_el))
    got = sinkhorn(logits, p)
    assert got.dtype == F32 and got.shape == (m, hc, hc)
    for r in range(m):
        want = naive.sinkhorn([list(row) for row in logits[r]], hc, p.hc_eps, p.sinkhorn_iters)
        assert (u(got[r]) == f32_bits(want)).all()


@SET
@given(data=st.data(), m=st.integers(1, 3), hc=st.integers(1, 4), p=params)
def test_split_matches_naive(naive, data, m, hc, p):
    mixes = data.draw(arr((m, (2 + hc) * hc), fl(-30.0, 30.0)))
    base = data.draw(arr(((2 + hc) * hc,), fl(-3.0, 3.0)))
    scale = data.draw(arr((3,), fl(0.05, 2.0)))
    pre, post, comb = mhc_split(mixes, base, scale, hc, p)
    assert pre.shape == post.shape == (m, hc) and comb.shape == (m, hc, hc)
    for r in range(m):
        npre, npost, ncomb = naive.split_row(list(mixes[r]), base, scale, hc, p.hc_eps, p.sinkhorn_iters)
        assert (u(pre[r]) == f32_bits(npre)).all()
        assert (u(post[r]) == f32_bits(npost)).all()
        assert (u(comb[r]) == f32_bits(ncomb)).all()


@SET
@given(data=st.data(), m=st.integers(1, 3), hc=st.integers(1, 4))
def test_split_ranges(data, m, hc):
    """Accuracy-level sanity of the documented formulas: pre in (eps, 1+eps], post in [0, 2],
    comb close to doubly stochastic after 20 Sinkhorn iterations."""
    mixes = data.draw(arr((m, (2 + hc) * hc), fl(-5.0, 5.0)))
    base = data.draw(arr(((2 + hc) * hc,), fl(-1.0, 1.0)))
    scale = data.draw(arr((3,), fl(0.05, 1.0)))
    pre, post, comb = mhc_split(mixes, base, scale, hc, DSV4)
    assert ((pre > 0) & (pre <= 1 + 2e-6)).all()
    assert ((post >= 0) & (post <= 2)).all()
    assert np.allclose(comb.sum(axis=-2), 1, atol=1e-3)
    # 20 Sinkhorn iterations do not make every matrix doubly stochastic (logits near +-6 converge
    # slowly), so the row sums are compared with the same 20 iterations done in float64
    ref = _comb_float64(mixes, base, scale, hc, DSV4.hc_eps, DSV4.sinkhorn_iters)
    assert np.allclose(comb.sum(axis=-1), ref.sum(axis=-1), atol=1e-5)
    assert np.allclose(comb, ref, atol=1e-5)


def _comb_float64(mixes, base, scale, hc, eps, iters):
    """DESIGN.md's comb formula in float64 with np.exp: softmax over k, + eps, column then row/column
    normalisation, `iters` normalisations of columns in all."""
    m = mixes.astype(np.float64)
    off = 2 * hc
    logit = (m[:, off:off + hc * hc] * np.float64(scale[2]) + base[off:off + hc * hc]).reshape(-1, hc, hc)
    e = np.exp(logit - logit.max(axis=-1, keepdims=True))
    c = e / e.sum(axis=-1, keepdims=True) + eps
    c = c / (c.sum(axis=-2, keepdims=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(axis=-1, keepdims=True) + eps)
        c = c / (c.sum(axis=-2, keepdims=True) + eps)
    return c


# --- collapse and post -------------------------------------------------------------------------
@SET
@given(data=st.data(), m=st.integers(1, 3), hc=st.integers(1, 4), d=st.integers(1, 40))
def test_collapse_matches_naive(naive, data, m, hc, d):
    pre = data.draw(arr((m, hc), fl(0.0, 1.0)))
    streams = data.draw(arr((m, hc, d), hidden, BF16))
    got = collapse(pre, streams)
    assert got.dtype == BF16 and got.shape == (m, d)
    for r, row in enumerate(rows_of(streams)):
        assert list(u(got[r])) == naive.collapse_row(list(pre[r]), row)


def test_collapse_of_negative_zeros_keeps_the_sign(naive):
    """The sum over streams starts from the first product, not from +0.0: all -0.0 stays -0.0."""
    pre = np.array([[0.5, 0.25, 0.125, 0.125]], np.float32)
    streams = np.full((1, 4, 3), -0.0, np.float32).astype(BF16)
    got = collapse(pre, streams)
    assert (u(got) == 0x8000).all()
    assert list(u(got[0])) == naive.collapse_row(list(pre[0]), rows_of(streams)[0])


@SET
@given(data=st.data(), m=st.integers(1, 3), hc=st.integers(1, 4), d=st.integers(1, 40))
def test_post_matches_naive(naive, data, m, hc, d):
    x, residual, post, comb = data.draw(carried(m, hc, d))
    got = mhc_post(x, residual, post, comb)
    assert got.dtype == BF16 and got.shape == (m, hc, d)
    for r in range(m):
        want = naive.post_row(list(x[r].astype(np.float32)), rows_of(residual)[r], list(post[r]),
                              [list(c) for c in comb[r]])
        assert u(got[r]).tolist() == [[int(v) for v in row] for row in want]


def test_post_applies_comb_transposed():
    """comb[j, k] carries stream j into stream k: a permutation matrix moves stream 0 to stream 1."""
    residual = np.arange(4 * 2, dtype=np.float32).reshape(1, 4, 2).astype(BF16)
    comb = np.zeros((1, 4, 4), np.float32)
    for j, k in [(0, 1), (1, 2), (2, 3), (3, 0)]:
        comb[0, j, k] = 1.0
    out = mhc_post(np.zeros((1, 2), BF16), residual, np.zeros((1, 4), np.float32), comb).astype(np.float32)
    r = residual.astype(np.float32)
    assert (out[0, 1] == r[0, 0]).all() and (out[0, 0] == r[0, 3]).all()


# --- whole boundaries --------------------------------------------------------------------------
def _check_pre_outputs(naive, out, streams_rows, fn, base, scale, hc, p):
    for r, srow in enumerate(streams_rows):
        y, post, comb = naive.pre_stage(srow, fn, base, scale, hc, p)
        assert list(u(out["y"][r])) == y
        assert (u(out["post"][r]) == f32_bits(post)).all()
        assert (u(out["comb"][r]) == f32_bits(comb)).all()


@SET
@given(data=st.data(), case=mhc_case(), p=params)
def test_mhc_pre_matches_naive(naive, data, case, p):
    m, hc, d, fn, base, scale = case
    x = data.draw(arr((m, d), hidden, data.draw(st.sampled_from([BF16, F32]))))
    out = mhc_pre(x, fn, base, scale, hc, p)
    assert out["streams"].dtype == BF16 and out["streams"].shape == (m, hc, d)
    xb = [[naive.bf16(v) for v in x[r].astype(np.float32)] for r in range(m)]
    assert u(out["streams"]).tolist() == [[row] * hc for row in xb]
    streams_rows = [[[naive.bits_to_f32(b) for b in xb[r]] for _ in range(hc)] for r in range(m)]
    _check_pre_outputs(naive, out, streams_rows, fn, base, scale, hc, p)


@SET
@given(data=st.data(), case=mhc_case(), p=params)
def test_mhc_post_pre_matches_naive(naive, data, case, p):
    m, hc, d, fn, base, scale = case
    x, residual, post, comb = data.draw(carried(m, hc, d))
    out = mhc_post_pre(x, residual, post, comb, fn, base, scale, p)
    streams = [naive.post_row(list(x[r].astype(np.float32)), rows_of(residual)[r], list(post[r]),
                              [list(c) for c in comb[r]]) for r in range(m)]
    assert u(out["streams"]).tolist() == [[[int(v) for v in row] for row in s] for s in streams]
    streams_rows = [[[naive.bits_to_f32(b) for b in row] for row in s] for s in streams]
    _check_pre_outputs(naive, out, streams_rows, fn, base, scale, hc, p)


@SET
@given(data=st.data(), case=mhc_case(head=True), p=params)
def test_mhc_post_head_matches_naive(naive, data, case, p):
    m, hc, d, fn, base, scale = case
    x, residual, post, comb = data.draw(carried(m, hc, d))
    out = mhc_post_head(x, residual, post, comb, fn, base, scale, p)
    assert set(out) == {"streams", "y"}
    streams = [naive.post_row(list(x[r].astype(np.float32)), rows_of(residual)[r], list(post[r]),
                              [list(c) for c in comb[r]]) for r in range(m)]
    assert u(out["streams"]).tolist() == [[[int(v) for v in row] for row in s] for s in streams]
    for r, s in enumerate(streams):
        srow = [[naive.bits_to_f32(b) for b in row] for row in s]
        assert list(u(out["y"][r])) == naive.head_stage(srow, fn, base, scale, hc, p)
    # the head is also available on its own
    assert (u(mhc_head_collapse(out["streams"], fn, base, scale, p)) == u(out["y"])).all()


@FEW
@given(data=st.data(), d=st.integers(257, 400))
def test_mhc_post_pre_wide(naive, data, d):
    """The production HC=4 with HC*D > 1024 (several elements per lane), one row."""
    fn = data.draw(arr((24, 4 * d), weights))
    base = data.draw(arr((24,), fl(-3.0, 3.0)))
    scale = data.draw(arr((3,), fl(0.05, 2.0)))
    x, residual, post, comb = data.draw(carried(1, 4, d))
    out = mhc_post_pre(x, residual, post, comb, fn, base, scale, DSV4)
    s = naive.post_row(list(x[0].astype(np.float32)), rows_of(residual)[0], list(post[0]),
                       [list(c) for c in comb[0]])
    assert u(out["streams"][0]).tolist() == [[int(v) for v in row] for row in s]
    _check_pre_outputs(naive, out, [[[naive.bits_to_f32(b) for b in row] for row in s]], fn, base, scale, 4, DSV4)


@SET
@given(data=st.data(), case=mhc_case())
def test_rows_are_independent(data, case):
    """Row m's outputs depend only on row m (so a fixed-width M=8 kernel may pad rows)."""
    m, hc, d, fn, base, scale = case
    x, residual, post, comb = data.draw(carried(m, hc, d))
    whole = mhc_post_pre(x, residual, post, comb, fn, base, scale, DSV4)
    for r in range(m):
        one = mhc_post_pre(x[r:r + 1], residual[r:r + 1], post[r:r + 1], comb[r:r + 1], fn, base, scale, DSV4)
        for k in whole:
            assert (u(one[k][0]) == u(whole[k][r])).all(), k


# --- rmsnorm -----------------------------------------------------------------------------------
@SET
@given(data=st.data(), rows=st.integers(1, 3), d=st.integers(1, 64), eps=st.sampled_from([1e-6, 1e-5]),
       dtype=st.sampled_from([BF16, F32]))
def test_rmsnorm_matches_naive(naive, data, rows, d, eps, dtype):
    x = data.draw(arr((rows, d), hidden, dtype))
    w = data.draw(arr((d,), weights))
    got = rmsnorm(x, w, eps)
    assert got.dtype == BF16 and got.shape == (rows, d)
    for r in range(rows):
        assert list(u(got[r])) == naive.rmsnorm_row(list(x[r].astype(np.float32)), w, eps)


@FEW
@given(data=st.data(), d=st.integers(1025, 3000))
def test_rmsnorm_wide(naive, data, d):
    x = data.draw(arr((1, d), hidden, BF16))
    w = data.draw(arr((d,), weights))
    assert list(u(rmsnorm(x, w)[0])) == naive.rmsnorm_row(list(x[0].astype(np.float32)), w, 1e-6)


def test_rmsnorm_lane_order_reaches_the_output(naive):
    """An input where the lane order changes bf16 outputs: x = [4096, 1, 1, ...] (D=2048). Summed left
    to right every 1 is lost against 2^24 (ties to even); in 1024 lanes the ones meet each other
    first. The contract must follow the lanes, and the difference must be visible in y."""
    d = 2048
    x = np.ones((1, d), np.float32)
    x[0, 0] = 4096.0
    x = x.astype(BF16)
    w = np.random.default_rng(7).uniform(0.5, 2.0, d).astype(np.float32)
    got = rmsnorm(x, w)
    assert list(u(got[0])) == naive.rmsnorm_row(list(x[0].astype(np.float32)), w, 1e-6)
    xf = x.astype(np.float32)[0]
    ss = np.float32(0)
    for v in xf:
        ss = np.float32(ss + v * v)
    r = np.float32(1) / np.sqrt(ss / np.float32(d) + np.float32(1e-6))
    left_to_right = ((xf * r) * w).astype(BF16)
    assert np.count_nonzero(u(left_to_right) != u(got[0])) > 0
