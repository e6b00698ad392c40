"""The draft's dense projections as one contract: a grouped quantized linear (wq_a, wkv, wq_b, wo_b,
main_proj with one group; wo_a with its einsum groups).

  dense(a, W)[t, g*N + n] = linear(a[t, g*K:(g+1)*K], W[g])[t, n]     g = 0 .. G-1

`a` is an act_qdq'd activation [T, G*K] (codes and one E8M0 scale per 32 inputs; a group's K is on the
32-grid, so its QDQ blocks never straddle two groups), W holds G weights [N, K]: FP8 E4M3 codes with
32x32 E8M0 blocks (packed) or their exact bf16 expansion (expanded). Each group is contracts.qlinear's
linear, in its fixed fp32 order, with a bf16 output (the official linear; wo_a's bf16 einsum over a
QDQ'd `o` and weights dequantized once is this with G groups) or the fp32 partial (wo_b, whose full
sum over the TP ranks the official model rounds).
"""

from __future__ import annotations

import numpy as np

from .act_qdq import QAct
from .qlinear import QWeight, linear
from .quant import GROUP, QuantInputError


def dense_weights(w: np.ndarray, s: np.ndarray | None) -> list:
    """Per-group weights: QWeight("fp8", w[g], s[g]) when scales are given (packed), else bf16 w[g]."""
    w = np.asarray(w)
    if w.ndim != 3:
        raise QuantInputError(f"dense weight must be [groups, N, K], got shape {w.shape}")
    if s is None:
        return [w[g] for g in range(w.shape[0])]
    s = np.asarray(s)
    if s.ndim != 3 or s.shape[0] != w.shape[0]:
        raise QuantInputError(f"dense scales {s.shape} do not match weight {w.shape}")
    return [QWeight("fp8", w[g], s[g]) for g in range(w.shape[0])]


def dense(a: QAct, weights: list, out: str = "bfloat16") -> np.ndarray:
    """The grouped linear of the module doc; `weights` from dense_weights."""
    codes, scales = np.asarray(a.codes), np.asarray(a.scales)
    groups = len(weights)
    if codes.ndim != 2 or groups == 0 or codes.shape[1] % groups:
        raise QuantInputError(f"dense: activation {codes.shape} does not split into {groups} groups")
    k = codes.shape[1] // groups
    if k % GROUP or scales.shape != (codes.shape[0], codes.shape[1] // GROUP):
        raise QuantInputError(f"dense: activation codes {codes.shape} and scales {scales.shape} are off the 32-grid")
    kg = k // GROUP
    parts = [linear(QAct(codes[:, g * k:(g + 1) * k], scales[:, g * kg:(g + 1) * kg]), w, out)
             for g, w in enumerate(weights)]
    return np.concatenate(parts, axis=1)
