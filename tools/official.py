"""The public DeepSeek-V4 mHC formulas (official `inference/model.py`: hc_pre, hc_post, hc_head,
hc_split_sinkhorn) written in torch, in any dtype, and the error measures used against them.

For accuracy measurements only (tests/test_contracts_accuracy.py, tools/accuracy_report.py): these
never define bits; the numpy contracts (decoder_shell/contracts/) do, which is why this lives outside
the package (the package imports torch only under capture/). Needs torch (the `test`/`capture` extras).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from decoder_shell.contracts.bits import ulp  # noqa: F401  (the one ulp distance)

HC, ITERS, EPS = 4, 20, 1e-6


def official_split(mixes, scale, base):
    pre = torch.sigmoid(mixes[..., :HC] * scale[0] + base[:HC]) + EPS
    post = 2 * torch.sigmoid(mixes[..., HC:2 * HC] * scale[1] + base[HC:2 * HC])
    comb = mixes[..., 2 * HC:].unflatten(-1, (HC, HC)) * scale[2] + base[2 * HC:].view(HC, HC)
    comb = torch.softmax(comb, dim=-1) + EPS
    comb = comb / (comb.sum(-2, keepdim=True) + EPS)
    for _ in range(ITERS - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + EPS)
        comb = comb / (comb.sum(-2, keepdim=True) + EPS)
    return pre, post, comb


def official_mixes(streams, fn, dt):
    x = streams.flatten(-2).to(dt)
    return F.linear(x, fn.to(dt)) * torch.rsqrt(x.square().mean(-1, keepdim=True) + EPS), x


def official_pre(streams, fn, base, scale, dt):
    mixes, x = official_mixes(streams, fn, dt)
    pre, post, comb = official_split(mixes, scale.to(dt), base.to(dt))
    return torch.sum(pre.unsqueeze(-1) * x.view(streams.shape), dim=-2), post, comb


def official_post(x, residual, post, comb, dt):
    x, residual, post, comb = (t.to(dt) for t in (x, residual, post, comb))
    return post.unsqueeze(-1) * x.unsqueeze(-2) + torch.sum(comb.unsqueeze(-1) * residual.unsqueeze(-2), dim=-3)


def official_head(streams, fn, base, scale, dt):
    mixes, x = official_mixes(streams, fn, dt)
    pre = torch.sigmoid(mixes * scale.to(dt)[0] + base.to(dt)) + EPS
    return torch.sum(pre.unsqueeze(-1) * x.view(streams.shape), dim=-2)


# --- error measures -------------------------------------------------------------------------------
def significant(exact: np.ndarray) -> np.ndarray:
    """Elements whose exact value is at least 1e-3 of the output's rms. Near a cancellation the
    absolute error of any fp32 sum is many ulp of the tiny result; such elements say nothing about
    the order of evaluation, so the ulp and relative-error measures leave them out."""
    return np.abs(exact) >= 1e-3 * np.sqrt(np.mean(exact ** 2))


def rel(a: np.ndarray, exact: np.ndarray) -> float:
    m = significant(exact)
    a = a.astype(np.float64)
    return float(np.max(np.abs(a[m] - exact[m]) / np.abs(exact[m]))) if m.any() else 0.0
