"""Quantized draft contracts: act_qdq, MXFP4 / FP8 weights, quantized linear, gate, expert, MoE.

Exactness is tested against independent readings of the official arithmetic (torch's own E4M3
conversion for act_qdq, plain-Python scalar loops of the documented order for the linear) and by the
packed == expanded theorem; accuracy (tolerance) against float64 and torch's formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoder_shell.contracts.act_qdq import act_qdq
from decoder_shell.contracts.expert import expert
from decoder_shell.contracts.moe import (ExpertWeights, check_ids, combine_slots, moe_single, moe_tp,
                                         routed_slots)
from decoder_shell.contracts.moe_gate import gate_linear, gate_route, moe_gate
from decoder_shell.contracts.numerics import F32, plog1p, psilu, psoftplus, to_bf16
from decoder_shell.contracts.qlinear import QWeight, expand, qlinear, qlinear_expanded
from decoder_shell.contracts.quant import QuantInputError

SET = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
E2M1_TABLE = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def rand_mx(rng, n, k, lo=112, hi=132):
    return QWeight("mxfp4", rng.integers(0, 256, (n, k // 2), dtype=np.uint8),
                   rng.integers(lo, hi, (n, k // 32), dtype=np.uint8))


def rand_fp8(rng, n, k, lo=112, hi=132):
    c = rng.integers(0, 256, (n, k), dtype=np.uint8)
    c[(c & 0x7F) == 0x7F] ^= 0x01  # no NaN codes
    return QWeight("fp8", c, rng.integers(lo, hi, (n // 32, k // 32), dtype=np.uint8))


def rand_act(rng, t, k, spread=4.0):
    """bf16 activations whose per-32 magnitudes vary over several binades (and some exact zeros)."""
    x = rng.standard_normal((t, k)) * np.exp2(rng.uniform(-spread, spread, (t, k // 32))).repeat(32, axis=1)
    x[rng.random((t, k)) < 0.05] = 0.0
    return to_bf16(x)


# ---- act_qdq: bit for bit against torch's own reading of the official act_quant ----

def torch_act_quant(x: np.ndarray):
    """The official formula in torch: amax floor 1e-4, scale 2^ceil(log2(amax/448)) from the fp32
    exponent bits, clamp, torch's E4M3 cast; returns (codes, scale bytes, bf16 q*s)."""
    xt = torch.from_numpy(np.asarray(x, np.float32)).reshape(x.shape[0], -1, 32)
    amax = xt.abs().amax(-1).clamp(min=1e-4)
    v = amax * torch.tensor(1.0 / 448.0, dtype=torch.float32)
    b = v.view(torch.int32)
    e = ((b >> 23) & 0xFF) + ((b & 0x7FFFFF) != 0).to(torch.int32)
    s = (e << 23).view(torch.float32)
    q = (xt / s[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    out = (q.float() * s[..., None]).to(torch.bfloat16)
    return (q.view(torch.uint8).reshape(x.shape).numpy(), e.to(torch.uint8).numpy(),
            out.reshape(x.shape).view(torch.int16).numpy().view(np.uint16))


@SET
@given(st.integers(1, 4), st.integers(1, 5), st.integers(0, 2**31 - 1), st.floats(0.0, 30.0))
def test_act_qdq_matches_torch_official_bit_for_bit(t, groups, seed, spread):
    rng = np.random.default_rng(seed)
    x = rand_act(rng, t, 32 * groups, spread)
    q = act_qdq(x)
    codes, scales, out = torch_act_quant(x.astype(F32))
    assert np.array_equal(q.codes, codes)
    assert np.array_equal(q.scales, scales)
    assert np.array_equal(bits(q.dequant()), out)


def test_act_qdq_edges():
    x = np.zeros((1, 64), F32)
    x[0, 32:] = 448.0  # amax exactly 448 * 2^0: scale 2^0, codes 448
    q = act_qdq(x)
    assert q.scales.tolist() == [[127 - 22, 127]]  # 1e-4/448 -> 2^-22
    assert np.array_equal(q.dequant().astype(F32), x)
    neg0 = np.full((1, 32), -0.0, F32)
    assert bits(act_qdq(neg0).dequant()).tolist() == [[0x8000] * 32]  # -0 stays -0
    with pytest.raises(QuantInputError, match="multiple of 32"):
        act_qdq(np.zeros((2, 48), F32))
    with pytest.raises(QuantInputError, match="NaN or infinity"):
        act_qdq(np.full((1, 32), np.nan, F32))


# ---- MXFP4 / FP8 decoding ----

@SET
@given(st.integers(0, 2**31 - 1))
def test_mxfp4_decode_follows_the_table(seed):
    rng = np.random.default_rng(seed)
    w = rand_mx(rng, 2, 64, 100, 150)
    dec = expand(w).astype(np.float64)
    for n in range(2):
        for k in range(64):
            byte = int(w.codes[n, k // 2])
            nib = byte & 0xF if k % 2 == 0 else byte >> 4
            v = (-1.0 if nib & 8 else 1.0) * E2M1_TABLE[nib & 7] * 2.0 ** (int(w.scales[n, k // 32]) - 127)
            assert dec[n, k] == v and math.copysign(1, dec[n, k]) == math.copysign(1, v)


def test_fp8_block_scales_cover_32x32():
    rng = np.random.default_rng(1)
    w = rand_fp8(rng, 64, 64)
    dec = expand(w).astype(np.float64)
    ref = torch.from_numpy(w.codes.copy()).view(torch.float8_e4m3fn).double().numpy()
    scale = np.exp2(w.scales.astype(np.float64) - 127).repeat(32, 0).repeat(32, 1)
    assert np.array_equal(dec, ref * scale)


def test_bad_quantized_input_is_refused():
    rng = np.random.default_rng(2)
    w = rand_mx(rng, 32, 64)
    bad = w.scales.copy()
    bad[3, 1] = 255
    with pytest.raises(QuantInputError, match=r"byte 255 \(NaN\) at index \(3, 1\)"):
        expand(QWeight("mxfp4", w.codes, bad))
    with pytest.raises(QuantInputError, match="scales are"):
        QWeight("mxfp4", w.codes, w.scales[:, :1])
    f = rand_fp8(rng, 32, 32)
    nan = f.codes.copy()
    nan[0, 0] = 0x7F
    with pytest.raises(QuantInputError, match="NaN code"):
        expand(QWeight("fp8", nan, f.scales))
    with pytest.raises(QuantInputError, match="multiple of 32"):
        QWeight("fp8", np.zeros((40, 32), np.uint8), np.zeros((1, 1), np.uint8))
    a = act_qdq(rand_act(rng, 2, 64))
    with pytest.raises(QuantInputError, match="out of range"):
        qlinear(a, QWeight("mxfp4", w.codes, np.full_like(w.scales, 20)))
    with pytest.raises(QuantInputError, match="expert id out of range"):
        check_ids(np.array([[0, 1, 128]], np.int32), 128)
    with pytest.raises(QuantInputError, match="repeats"):
        check_ids(np.array([[4, 1, 4]], np.int32), 128)


# ---- the quantized linear ----

def scalar_qlinear(a_bf16, w_bf16):
    """The documented order one IEEE operation at a time on np.float32 scalars: per group the
    products left to right from the first, then lane l (0..31) adds groups l, l+32, ... from +0,
    then the adjacent-pair tree over the 32 lanes."""
    t, k = a_bf16.shape
    n = w_bf16.shape[0]
    a = a_bf16.astype(F32)
    w = w_bf16.astype(F32)
    out = np.zeros((t, n), F32)
    for i in range(t):
        for o in range(n):
            sums = []
            for j in range(k // 32):
                acc = a[i, 32 * j] * w[o, 32 * j]
                for q in range(1, 32):
                    acc = np.float32(acc + a[i, 32 * j + q] * w[o, 32 * j + q])
                sums.append(acc)
            lanes = [np.float32(0.0)] * 32
            for j, p in enumerate(sums):
                lanes[j % 32] = np.float32(lanes[j % 32] + p)
            while len(lanes) > 1:
                lanes = [np.float32(lanes[2 * m] + lanes[2 * m + 1]) for m in range(len(lanes) // 2)]
            out[i, o] = lanes[0]
    return out


@FEW
@given(st.integers(1, 2), st.integers(1, 3), st.sampled_from([1, 2, 33, 35]), st.sampled_from(["mxfp4", "fp8"]),
       st.integers(0, 2**31 - 1))
def test_qlinear_matches_scalar_order(t, n32, groups, fmt, seed):
    rng = np.random.default_rng(seed)
    k = 32 * groups
    w = (rand_mx if fmt == "mxfp4" else rand_fp8)(rng, 32 * n32 if fmt == "fp8" else n32, k)
    a = act_qdq(rand_act(rng, t, k))
    ref = scalar_qlinear(a.dequant(), expand(w))
    assert np.array_equal(bits(qlinear(a, w, "float32")), bits(ref))
    assert np.array_equal(bits(qlinear(a, w, "bfloat16")), bits(to_bf16(ref)))


@SET
@given(st.integers(1, 6), st.integers(1, 3), st.integers(1, 12), st.sampled_from(["mxfp4", "fp8"]),
       st.integers(0, 2**31 - 1), st.integers(-20, 12), st.floats(0.0, 12.0))
def test_packed_and_expanded_give_the_same_bits(t, n32, groups, fmt, seed, wexp, spread):
    """The theorem of qlinear's docstring on random codes, scales anywhere in a wide range, and
    activations spread over many binades (including all-zero groups)."""
    rng = np.random.default_rng(seed)
    k = 32 * groups
    lo = 127 + wexp
    w = (rand_mx if fmt == "mxfp4" else rand_fp8)(rng, 32 * n32, k, lo, lo + 12)
    a = act_qdq(rand_act(rng, t, k, spread))
    for out in ("float32", "bfloat16"):
        assert np.array_equal(bits(qlinear(a, w, out)), bits(qlinear_expanded(a.dequant(), expand(w), out)))


def test_qlinear_accuracy_against_float64():
    rng = np.random.default_rng(3)
    for fmt, mk in (("mxfp4", rand_mx), ("fp8", rand_fp8)):
        w = mk(rng, 64, 5120)
        a = act_qdq(rand_act(rng, 4, 5120))
        ref = a.dequant().astype(np.float64) @ expand(w).astype(np.float64).T
        y = qlinear(a, w, "float32").astype(np.float64)
        scale = np.abs(a.dequant().astype(np.float64)) @ np.abs(expand(w).astype(np.float64)).T
        assert (np.abs(y - ref) <= 2.0**-21 * scale).all(), fmt  # a few fp32 roundings of the abs sum


# ---- portable transcendental helpers ----

def ulp32(x):
    x = np.abs(np.asarray(x, np.float64)).astype(F32)
    return (np.nextafter(x, np.float32(np.inf)) - x).astype(np.float64)


def test_softplus_log1p_silu_accuracy():
    u = np.linspace(0.0, 1.0, 20001, dtype=F32)
    assert (np.abs(plog1p(u) - np.log1p(u.astype(np.float64))) <= 3 * ulp32(np.log1p(u.astype(np.float64)))).all()  # measured 2.49
    x = np.linspace(-40.0, 40.0, 40001, dtype=F32)
    ref = np.logaddexp(0.0, x.astype(np.float64))
    assert (np.abs(psoftplus(x) - ref) <= 4 * ulp32(ref)).all()  # measured 2.93
    g = np.linspace(-60.0, 10.0, 40001, dtype=F32)
    ref = g.astype(np.float64) / (1.0 + np.exp(-g.astype(np.float64)))
    assert (np.abs(psilu(g) - ref) <= 3 * ulp32(ref)).all()  # measured 2.12


# ---- the gate ----

def test_gate_against_torch_official():
    rng = np.random.default_rng(4)
    t, e, d = 20, 128, 1024
    x = to_bf16(rng.standard_normal((t, d)))
    w = to_bf16(rng.standard_normal((e, d)) / 32)
    b = (rng.standard_normal(e) * 0.05).astype(F32)
    ids, rw = moe_gate(x, w, b)
    xt, wt = torch.from_numpy(x.astype(F32)), torch.from_numpy(w.astype(F32))
    s = torch.nn.functional.linear(xt, wt).double()
    s = torch.nn.functional.softplus(s).sqrt()
    tid = torch.topk(s + torch.from_numpy(b).double(), 3, dim=-1).indices
    tw = s.gather(1, tid)
    tw = tw / (tw.sum(-1, keepdim=True) + 1e-20) * 1.5
    assert np.array_equal(ids, tid.numpy())
    assert np.allclose(rw, tw.numpy(), rtol=2e-6, atol=0)


def test_gate_ties_pick_the_smaller_id_and_weights_sum_to_scale():
    x = to_bf16(np.ones((1, 32)))
    w = to_bf16(np.zeros((8, 32)))
    ids, rw = moe_gate(x, w, np.zeros(8, F32))
    assert ids.tolist() == [[0, 1, 2]]
    assert rw.dtype == F32 and abs(float(rw.sum()) - 1.5) < 1e-6
    ids, _ = moe_gate(x, w, np.array([0, 0, 0, 0, 0, 1, 0, 1], F32))
    assert ids.tolist() == [[5, 7, 0]]


@settings(max_examples=20, deadline=None)
@given(t=st.integers(1, 6), d=st.sampled_from([32, 1024, 1056, 3072]), e=st.integers(1, 40),
       cuts=st.lists(st.integers(1, 39), max_size=6), seed=st.integers(0, 2 ** 16))
def test_gate_linear_of_any_expert_split_is_the_whole(t, d, e, cuts, seed):
    """Each expert's sum stands alone (what lets the split gate give a block any group of experts): the
    linear of the experts cut into groups, concatenated, is the whole linear bit for bit; and the gate is
    gate_route of it. A left-to-right sum is not the 1024-lane order (some element differs)."""
    rng = np.random.default_rng(seed)
    x = to_bf16(rng.standard_normal((t, d)))
    w = to_bf16(rng.standard_normal((e, d)) / np.sqrt(d))
    b = (rng.standard_normal(e) * 0.1).astype(F32)
    whole = gate_linear(x, w)
    edges = [0, *sorted({c for c in cuts if c < e}), e]
    parts = np.concatenate([gate_linear(x, w[lo:hi]) for lo, hi in zip(edges, edges[1:])], axis=1)
    assert parts.dtype == F32 and np.array_equal(parts.view(np.uint32), whole.view(np.uint32))
    k = min(3, e)
    for got, want in zip(gate_route(whole, b, k), moe_gate(x, w, b, k)):
        assert np.array_equal(got, want)


def test_gate_linear_order_is_not_left_to_right():
    rng = np.random.default_rng(1)
    x = to_bf16(rng.standard_normal((8, 5120)))
    w = to_bf16(rng.standard_normal((128, 5120)) / 64)
    seq = np.cumsum(x.astype(F32)[:, None, :] * w.astype(F32)[None], axis=-1, dtype=F32)[..., -1]
    assert not np.array_equal(seq, gate_linear(x, w))


# ---- expert and MoE ----

def make_moe(rng, d=128, i=128, e=8):
    ex = [ExpertWeights(rand_mx(rng, i, d, 118, 124), rand_mx(rng, i, d, 118, 124), rand_mx(rng, d, i, 118, 124))
          for _ in range(e)]
    sh = ExpertWeights(rand_fp8(rng, i, d, 118, 124), rand_fp8(rng, i, d, 118, 124), rand_fp8(rng, d, i, 118, 124))
    gw = to_bf16(rng.standard_normal((e, d)) * 0.1)
    gb = (rng.standard_normal(e) * 0.1).astype(F32)
    return ex, sh, gw, gb


def expanded(ew):
    return ExpertWeights(*(expand(w) for w in (ew.w1, ew.w3, ew.w2)))


def test_expert_accuracy_against_torch():
    rng = np.random.default_rng(5)
    ex, _, _, _ = make_moe(rng, 256, 256, 1)
    x = rand_act(rng, 6, 256, 1.0)
    xq = act_qdq(x)
    rw = rng.uniform(0.1, 1.0, 6).astype(F32)
    y = expert(xq, ex[0].w1, ex[0].w3, ex[0].w2, rw, "float32").astype(np.float64)
    xe = torch.from_numpy(xq.dequant().astype(np.float64))
    w1, w3, w2 = (torch.from_numpy(expand(w).astype(np.float64)) for w in (ex[0].w1, ex[0].w3, ex[0].w2))
    g = (xe @ w1.T).to(torch.bfloat16).double().clamp(max=10)
    u = (xe @ w3.T).to(torch.bfloat16).double().clamp(-10, 10)
    h = torch.from_numpy(rw.astype(np.float64))[:, None] * torch.nn.functional.silu(g) * u
    hq = torch.from_numpy(act_qdq(to_bf16(h.numpy())).dequant().astype(np.float64))
    ref = (hq @ w2.T).numpy()
    assert np.abs(y - ref).max() <= 1e-3 * np.abs(ref).max()


@FEW
@given(st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_moe_packed_equals_expanded_and_tp1_equals_single(t, seed):
    rng = np.random.default_rng(seed)
    ex, sh, gw, gb = make_moe(rng)
    x = to_bf16(rng.standard_normal((t, 128)))
    single = moe_single(x, gw, gb, ex, sh)
    assert np.array_equal(bits(moe_tp(x, gw, gb, ex, sh, 1, "official")["out"]), bits(single))
    for mode in ("official", "fused"):
        p = moe_tp(x, gw, gb, ex, sh, 2, mode)
        q = moe_tp(x, gw, gb, [expanded(e) for e in ex], expanded(sh), 2, mode)
        assert np.array_equal(bits(p["out"]), bits(q["out"]))
        # one bf16 rounding more or fewer per expert contribution: the two outputs differ by at most a
        # few bf16 half-ulps of the contributions summed into each element (not of the result: the
        # contributions can cancel to a small output, where a bound relative to the output fails)
        mag = sum(np.abs(sl.astype(np.float64)).sum(axis=1) + np.abs(shp.astype(np.float64))
                  for sl, shp in p["partials"])
        diff = np.abs(p["out"].astype(np.float64) - single.astype(np.float64))
        assert (diff <= 2.0**-7 * (mag + np.abs(single.astype(np.float64))) + 1e-30).all()


def test_combine_order_is_ascending_expert_id():
    rng = np.random.default_rng(6)
    slots = rng.standard_normal((50, 3, 16)).astype(F32) * np.float32(1e4)
    ids = np.stack([rng.permutation(128)[:3] for _ in range(50)]).astype(np.int32)
    perm = rng.permutation(3)
    a = combine_slots(slots, ids)
    b = combine_slots(slots[:, perm], ids[:, perm])
    assert np.array_equal(bits(a), bits(b))
    o = np.argsort(ids, axis=1)
    s = np.take_along_axis(slots, o[:, :, None], axis=1)
    assert np.array_equal(bits(a), bits(((np.float32(0) + s[:, 0]) + s[:, 1]) + s[:, 2]))


def test_routed_slots_rows_are_independent():
    """A row's slot outputs do not depend on which other rows share its experts."""
    rng = np.random.default_rng(7)
    ex, _, gw, gb = make_moe(rng)
    x = to_bf16(rng.standard_normal((6, 128)))
    ids, rw = moe_gate(x, gw, gb)
    full = routed_slots(act_qdq(x), ids, rw, ex)
    for r in range(6):
        one = routed_slots(act_qdq(x[r:r + 1]), ids[r:r + 1], rw[r:r + 1], ex)
        assert np.array_equal(bits(one[0]), bits(full[r]))
