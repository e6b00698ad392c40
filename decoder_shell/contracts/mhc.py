"""mHC (manifold-constrained hyper-connection) contracts, DeepSeek-V4 (DESIGN.md 3 and 4).

Shapes carry a leading row axis M: streams [M, HC, D] bf16, sub-block input/output [M, D] bf16,
post [M, HC] fp32, comb [M, HC, HC] fp32 (comb[m, j, k]: from stream j into stream k).

Exact fp32 order (docs/CONTRACTS.md has the full text):
- mixes:    x = streams.flatten(HC*D) as fp32; ss = lane_sum(x*x); r = 1 / sqrt(ss / N + norm_eps);
            mixes[o] = lane_sum(x * fn[o]) * r.
- split:    pre = sigmoid(mixes[0:HC]*scale0 + base) + hc_eps; post = 2*sigmoid(mixes[HC:2HC]*scale1
            + base); comb = softmax_k(mixes[2HC:]*scale2 + base) + hc_eps, then colsum-normalize,
            then (iters-1) x (rowsum, colsum); every small sum runs left to right over its index.
- collapse: y[d] = ((pre0*s0[d] + pre1*s1[d]) + pre2*s2[d]) + pre3*s3[d], rounded to bf16.
- post:     out[k,d] = post[k]*x[d] + (((c0k*r0[d] + c1k*r1[d]) + c2k*r2[d]) + c3k*r3[d]), to bf16.
- fused norm (vLLM): y = rmsnorm(collapse, norm_weight, norm_eps): the bf16 collapse, then the
            weighted RMSNorm of contracts/rmsnorm.py, which is what vLLM's unfused path computes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .numerics import F32, lane_sum, pexp, psigmoid, seq_sum, to_bf16
from .rmsnorm import rmsnorm

_f = np.float32


@dataclass(frozen=True)
class MhcParams:
    """Numerical constants of one model's mHC (DeepSeek-V4: all 1e-6, 20 Sinkhorn iterations)."""

    hc_eps: float = 1e-6
    norm_eps: float = 1e-6
    sinkhorn_iters: int = 20


DEFAULT = MhcParams()


def mhc_mixes(streams: np.ndarray, fn: np.ndarray, norm_eps: float) -> np.ndarray:
    """mixes [M, O] = (x @ fn^T) * rsqrt(mean(x^2) + eps), in the lane order of numerics.lane_sum."""
    m = streams.shape[0]
    x = np.asarray(streams, dtype=F32).reshape(m, -1)
    fn = np.asarray(fn, dtype=F32)
    if fn.shape[1] != x.shape[1]:
        raise ValueError(f"fn has {fn.shape[1]} columns, streams flatten to {x.shape[1]}")
    ss = lane_sum(x * x)
    r = _f(1.0) / np.sqrt(ss / _f(x.shape[1]) + _f(norm_eps))
    dots = lane_sum(x[:, None, :] * fn[None, :, :])
    return dots * r[:, None]


def sinkhorn(logits: np.ndarray, p: MhcParams, exp=pexp) -> np.ndarray:
    """[M, HC, HC] logits -> doubly-stochastic-ish comb: softmax over k, then column/row scaling."""
    eps = _f(p.hc_eps)
    e = exp(logits - logits.max(axis=-1, keepdims=True))
    comb = e / seq_sum(e, axis=-1)[..., None] + eps
    comb = comb / (seq_sum(comb, axis=-2)[..., None, :] + eps)
    for _ in range(p.sinkhorn_iters - 1):
        comb = comb / (seq_sum(comb, axis=-1)[..., None] + eps)
        comb = comb / (seq_sum(comb, axis=-2)[..., None, :] + eps)
    return comb


def mhc_split(mixes: np.ndarray, base: np.ndarray, scale: np.ndarray, hc: int, p: MhcParams = DEFAULT, exp=pexp):
    """mixes [M, (2+HC)*HC] -> (pre [M, HC], post [M, HC], comb [M, HC, HC]), all fp32."""
    base = np.asarray(base, dtype=F32)
    scale = np.asarray(scale, dtype=F32)
    pre = psigmoid(mixes[:, :hc] * scale[0] + base[:hc], exp) + _f(p.hc_eps)
    post = _f(2.0) * psigmoid(mixes[:, hc:2 * hc] * scale[1] + base[hc:2 * hc], exp)
    logits = (mixes[:, 2 * hc:] * scale[2] + base[2 * hc:]).reshape(-1, hc, hc)
    return pre, post, sinkhorn(logits, p, exp)


def collapse(pre: np.ndarray, streams: np.ndarray) -> np.ndarray:
    """y [M, D] bf16 = sum_h pre[h] * streams[h], left to right over h, in fp32."""
    s = np.asarray(streams, dtype=F32)
    return to_bf16(seq_sum(pre[:, :, None] * s, axis=1))


def mhc_post(x: np.ndarray, residual: np.ndarray, post: np.ndarray, comb: np.ndarray) -> np.ndarray:
    """New streams [M, HC, D] bf16: post[k]*x + sum_j comb[j,k]*residual[j] (comb transposed)."""
    xf = np.asarray(x, dtype=F32)
    r = np.asarray(residual, dtype=F32)
    mix = seq_sum(comb[:, :, :, None] * r[:, :, None, :], axis=1)  # sum over j -> [M, k, D]
    return to_bf16(post[:, :, None] * xf[:, None, :] + mix)


def _pre(streams, fn, base, scale, p: MhcParams, exp=pexp, norm_weight=None):
    hc = streams.shape[1]
    pre, post, comb = mhc_split(mhc_mixes(streams, fn, p.norm_eps), base, scale, hc, p, exp)
    y = collapse(pre, streams)
    if norm_weight is not None:
        y = rmsnorm(y, norm_weight, p.norm_eps)
    return {"y": y, "post": post, "comb": comb}


def mhc_pre(x, fn, base, scale, hc: int = 4, p: MhcParams = DEFAULT, exp=pexp, norm_weight=None) -> dict:
    """First boundary: x [M, D] (the reduced embedding) copied into HC streams, then hc_pre."""
    streams = np.repeat(to_bf16(x)[:, None, :], hc, axis=1)
    return {"streams": streams, **_pre(streams, fn, base, scale, p, exp, norm_weight)}


def mhc_pre_streams(streams, fn, base, scale, p: MhcParams = DEFAULT, exp=pexp, norm_weight=None) -> dict:
    """First boundary of a draft that builds its own streams (vLLM's MTP): hc_pre on them as given."""
    streams = np.asarray(streams)
    return {"streams": streams, **_pre(streams, fn, base, scale, p, exp, norm_weight)}


def mhc_post_pre(x, residual, post, comb, fn, base, scale, p: MhcParams = DEFAULT, exp=pexp,
                 norm_weight=None) -> dict:
    """Boundary between sub-blocks: hc_post of the finished one, hc_pre of the next."""
    streams = mhc_post(x, residual, post, comb)
    return {"streams": streams, **_pre(streams, fn, base, scale, p, exp, norm_weight)}


def mhc_head_collapse(streams, fn, base, scale, p: MhcParams = DEFAULT, exp=pexp) -> np.ndarray:
    """Head: pre = sigmoid(mixes*scale0 + base) + eps over HC mixes (no Sinkhorn), then collapse."""
    mixes = mhc_mixes(streams, fn, p.norm_eps)
    base = np.asarray(base, dtype=F32)
    pre = psigmoid(mixes * np.asarray(scale, dtype=F32)[0] + base, exp) + _f(p.hc_eps)
    return collapse(pre, streams)


def mhc_post_head(x, residual, post, comb, fn, base, scale, p: MhcParams = DEFAULT, exp=pexp) -> dict:
    """Last boundary: hc_post of the last sub-block, then the head collapse."""
    streams = mhc_post(x, residual, post, comb)
    return {"streams": streams, "y": mhc_head_collapse(streams, fn, base, scale, p, exp)}
