"""Accuracy of the mHC contracts against public implementations -- tolerance tests, never exactness.

References: `transformers` DeepseekV4HyperConnection / DeepseekV4HyperHead (our parameters loaded into
the modules), the hc_post expression of DeepseekV4DecoderLayer, and the official inference/model.py
formulas written in torch, in float32 and in float64 (the "true" value). Measured figures are in
docs/CONTRACTS.md (tools/accuracy_report.py); the bounds here leave a margin above them."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from decoder_shell.contracts import mhc as C
from decoder_shell.contracts.numerics import BF16

torch = pytest.importorskip("torch")
tmod = pytest.importorskip("transformers.models.deepseek_v4.modeling_deepseek_v4")
tcfg = pytest.importorskip("transformers.models.deepseek_v4.configuration_deepseek_v4")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from official import (EPS, HC, ITERS, official_head, official_post, official_pre, rel,  # noqa: E402
                      significant, ulp)

D, M, SEEDS = 1024, 2, 6


# --- helpers -----------------------------------------------------------------------------------
def tt(a: np.ndarray):
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def rounded(t, like: np.ndarray) -> np.ndarray:
    """A torch result rounded to the dtype of our output (float64 -> bf16/fp32, nearest even)."""
    if like.dtype == BF16 and t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    return t.double().numpy().astype(like.dtype)


def params(rng, head=False):
    o = HC if head else (2 + HC) * HC
    fn = rng.standard_normal((o, HC * D), dtype=np.float32) / np.float32(np.sqrt(HC * D))
    base = rng.standard_normal(o, dtype=np.float32) * np.float32(0.5)
    return fn, base, rng.uniform(0.25, 1.5, 1 if head else 3).astype(np.float32)


@pytest.fixture(scope="module")
def cases():
    """SEEDS random boundaries: mhc_pre, then mhc_post_pre and mhc_post_head fed realistic carries."""
    out = []
    for seed in range(SEEDS):
        rng = np.random.default_rng([77, seed])
        x0, x1, x2 = (rng.standard_normal((M, D), dtype=np.float32).astype(BF16) for _ in range(3))
        p0, p1, ph = params(rng), params(rng), params(rng, head=True)
        first = C.mhc_pre(x0, *p0)
        mid = C.mhc_post_pre(x1, first["streams"], first["post"], first["comb"], *p1)
        last = C.mhc_post_head(x2, mid["streams"], mid["post"], mid["comb"], *ph)
        out.append(dict(p0=p0, p1=p1, ph=ph, x1=x1, x2=x2, first=first, mid=mid, last=last))
    return out


@pytest.fixture(scope="module")
def tf_modules():
    cfg = tcfg.DeepseekV4Config(hidden_size=D, hc_mult=HC, hc_sinkhorn_iters=ITERS, hc_eps=EPS, rms_norm_eps=EPS)
    return tmod.DeepseekV4HyperConnection(cfg).eval(), tmod.DeepseekV4HyperHead(cfg).eval()


def pre_pairs(cases):
    for c in cases:
        yield c["first"], c["p0"]
        yield c["mid"], c["p1"]


def post_pairs(cases):
    yield from ((c["mid"], c["x1"], c["first"]) for c in cases)
    yield from ((c["last"], c["x2"], c["mid"]) for c in cases)


# --- against float64 ---------------------------------------------------------------------------
def test_hc_pre_outputs_close_to_float64(cases):
    for out, p in pre_pairs(cases):
        y64, post64, comb64 = official_pre(tt(out["streams"]), *map(tt, p), torch.float64)
        for name, ref in (("post", post64), ("comb", comb64)):
            exact = ref.numpy()
            assert rel(out[name], exact) < 1e-5, name
            assert ulp(out[name], rounded(ref, out[name]))[significant(exact)].max() <= 64, name
        # y: one fp32 sum of 4 products, rounded once: within 1 bf16 ulp of the correctly rounded value
        assert ulp(out["y"], rounded(y64, out["y"]))[significant(y64.numpy())].max() <= 1


def test_hc_post_streams_close_to_float64(cases):
    for out, x, prev in post_pairs(cases):
        s64 = official_post(*map(tt, (x, prev["streams"], prev["post"], prev["comb"])), torch.float64)
        exact = s64.numpy()
        assert ulp(out["streams"], rounded(s64, out["streams"]))[significant(exact)].max() <= 1
        assert rel(out["streams"], exact) <= 2.0 ** -8 * 1.01


def test_head_close_to_float64(cases):
    for c in cases:
        y64 = official_head(tt(c["last"]["streams"]), *map(tt, c["ph"]), torch.float64)
        assert ulp(c["last"]["y"], rounded(y64, c["last"]["y"]))[significant(y64.numpy())].max() <= 1


def test_contract_is_at_least_as_accurate_as_official_fp32(cases):
    """The lane-tree reductions are more accurate than a BLAS fp32 gemv: summed over all cases, the
    contract's worst relative error on post and comb is no larger than the official fp32 formula's."""
    ours, theirs = 0.0, 0.0
    for out, p in pre_pairs(cases):
        s = tt(out["streams"])
        r64 = official_pre(s, *map(tt, p), torch.float64)
        r32 = official_pre(s, *map(tt, p), torch.float32)
        for i, name in ((1, "post"), (2, "comb")):
            ours = max(ours, rel(out[name], r64[i].numpy()))
            theirs = max(theirs, rel(r32[i].numpy(), r64[i].numpy()))
    assert ours <= theirs


# --- against transformers ----------------------------------------------------------------------
@torch.no_grad()
def test_matches_transformers_hyper_connection(cases, tf_modules):
    """post and comb agree with transformers' to fp32 precision; y (bf16) is compared with the float64
    value, for both: the two round differently near zero, and the contract's worst error must be no
    larger than transformers' (per boundary), never merely within some ulp of transformers."""
    hc, _ = tf_modules
    for out, (fn, base, scale) in pre_pairs(cases):
        hc.fn.copy_(tt(fn))
        hc.base.copy_(tt(base))
        hc.scale.copy_(tt(scale))
        post, comb, y = hc(tt(out["streams"]).unsqueeze(0))  # batch 1, the M rows as the sequence
        assert y.dtype == torch.bfloat16 and post.dtype == comb.dtype == torch.float32
        assert rel(out["post"], post[0].double().numpy()) < 1e-5
        assert rel(out["comb"], comb[0].double().numpy()) < 1e-5
        y64 = official_pre(tt(out["streams"]), *map(tt, (fn, base, scale)), torch.float64)[0].numpy()
        ours_err = np.abs(out["y"].astype(np.float64) - y64)
        tf_err = np.abs(y[0].double().numpy() - y64)
        assert ours_err.max() <= tf_err.max()


@torch.no_grad()
def test_matches_transformers_hyper_head(cases, tf_modules):
    _, head = tf_modules
    for c in cases:
        fn, base, scale = c["ph"]
        head.hc_fn.copy_(tt(fn))
        head.hc_base.copy_(tt(base))
        head.hc_scale.copy_(tt(scale))
        y = head(tt(c["last"]["streams"]).unsqueeze(0))[0]
        # both against float64 (as for the hyper connection): the contract's worst error is no larger
        y64 = official_head(tt(c["last"]["streams"]), *map(tt, c["ph"]), torch.float64).numpy()
        ours_err = np.abs(c["last"]["y"].astype(np.float64) - y64)
        assert ours_err.max() <= np.abs(y.double().numpy() - y64).max()


@torch.no_grad()
def test_post_close_to_transformers_decoder_layer(cases):
    """transformers computes hc_post in bf16 (post and comb cast to bf16, bf16 matmul and add), so the
    bound is normwise, at bf16 scale; the contract keeps fp32 until one final rounding."""
    for out, x, prev in post_pairs(cases):
        r = tt(prev["streams"])
        dtype = r.dtype
        ref = prev["post"], prev["comb"]
        tf = tt(ref[0]).to(dtype).unsqueeze(-1) * tt(x).unsqueeze(-2) + torch.matmul(
            tt(ref[1]).to(dtype).transpose(-1, -2), r)
        exact = official_post(*map(tt, (x, prev["streams"], *ref)), torch.float64).numpy()
        rms = np.sqrt(np.mean(exact ** 2))
        ours_err = np.abs(out["streams"].astype(np.float64) - exact).max() / rms
        tf_err = np.abs(tf.double().numpy() - exact).max() / rms
        assert np.abs(out["streams"].astype(np.float64) - tf.double().numpy()).max() / rms < 0.05
        assert ours_err <= tf_err
