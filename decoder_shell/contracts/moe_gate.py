"""The MoE gate (router) of the DeepSeek-V4.1 draft, text tokens.

  scores[t, e] = lane_sum(fl(x[t, d] * W[e, d]))          fp32 linear, 1024-lane order (x bf16, W bf16 as fp32)
  scores       = sqrt(psoftplus(scores))                  correctly rounded sqrt
  ids[t]       = top-k of fl(scores + bias)               larger first; equal values: smaller expert id first
  w[t, i]      = scores[t, ids[t, i]]
  w            = fl(w / fl(seq_sum(w) + 1e-20)) * route_scale     sum in top-k order, then * 1.5
The bias (fp32) only selects; the weights come from the unbiased scores.
"""

from __future__ import annotations

import numpy as np

from .numerics import BF16, F32, lane_sum, psoftplus, seq_sum
from .quant import QuantInputError

_f = np.float32
TOP_K = 3
ROUTE_SCALE = _f(1.5)
NORM_EPS = _f(1e-20)
_CHUNK_ELEMS = 1 << 22


def gate_linear(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """[T, E] fp32 = x . W^T in the 1024-lane order, each expert's sum on its own (so any split of the
    experts computes the same bits)."""
    xf = np.asarray(x, dtype=F32)
    wf = np.asarray(weight, dtype=F32)
    if xf.ndim != 2 or wf.ndim != 2 or xf.shape[1] != wf.shape[1]:
        raise QuantInputError(f"gate: x {xf.shape} and weight {wf.shape} do not agree")
    t, d = xf.shape
    e = wf.shape[0]
    lin = np.empty((t, e), F32)
    step = max(1, _CHUNK_ELEMS // max(1, t * d))
    for lo in range(0, e, step):
        lin[:, lo:lo + step] = lane_sum(xf[:, None, :] * wf[None, lo:lo + step, :])
    return lin


def gate_scores(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """[T, E] fp32 = sqrt(softplus(x . W^T)), the linear in the 1024-lane order."""
    return np.sqrt(psoftplus(gate_linear(x, weight)))


def topk_ids(biased: np.ndarray, k: int) -> np.ndarray:
    """int32 [T, k]: indices of the k largest values per row, ties to the smaller index."""
    order = np.argsort(-biased, axis=-1, kind="stable")
    return order[:, :k].astype(np.int32)


def moe_gate(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, top_k: int = TOP_K,
             route_scale: float = ROUTE_SCALE) -> tuple[np.ndarray, np.ndarray]:
    """(ids int32 [T, k] in selection order, route weights fp32 [T, k])."""
    if np.asarray(weight).dtype != BF16:
        raise QuantInputError(f"gate weight must be bf16, not {np.asarray(weight).dtype}")
    return gate_route(gate_linear(x, weight), bias, top_k, route_scale)


def gate_route(linear: np.ndarray, bias: np.ndarray, top_k: int = TOP_K,
               route_scale: float = ROUTE_SCALE) -> tuple[np.ndarray, np.ndarray]:
    """(ids, route weights) from the fp32 linear sums [T, E]: sqrt(softplus), the biased top-k, the
    normalized weights (the gate after its linear)."""
    bias = np.asarray(bias, dtype=F32)
    s = np.sqrt(psoftplus(np.asarray(linear, dtype=F32)))
    if bias.shape != (s.shape[1],):
        raise QuantInputError(f"gate bias is {bias.shape}, expected ({s.shape[1]},)")
    if not 1 <= top_k <= s.shape[1]:
        raise QuantInputError(f"top-k {top_k} is not in 1..{s.shape[1]}")
    ids = topk_ids(s + bias, top_k)
    w = np.take_along_axis(s, ids.astype(np.int64), axis=1)
    w = w / (seq_sum(w, axis=1)[:, None] + NORM_EPS)
    return ids, w * _f(route_scale)
