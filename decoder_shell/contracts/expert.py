"""One SwiGLU expert of the draft MoE (routed: MXFP4; shared: FP8 blocks), on an act_qdq'd input.

  g  = bf16 linear(xq, w1) as fp32        u = bf16 linear(xq, w3) as fp32     (qlinear's order)
  u  = clamp(u, -10, 10)                  g = min(g, 10)
  h  = fl(psilu(g) * u)                   psilu(g) = fl(g / fl(1 + pexp(-g)))
  h  = fl(rw * h)                         routed experts only (rw: the row's route weight)
  hq = act_qdq(bf16(h))                   per 32 of the expert width (a rank's slice never straddles)
  y  = linear(hq, w2)                     fp32 (a rank's partial) or bf16 (a whole expert)
Weights are QWeight (packed) or bf16 arrays (expanded); both give the same bits (qlinear).
"""

from __future__ import annotations

import numpy as np

from .act_qdq import QAct, act_qdq
from .numerics import F32, psilu, to_bf16
from .qlinear import linear

_f = np.float32
CLAMP = _f(10.0)


def swiglu(g: np.ndarray, u: np.ndarray, route_weight=None) -> np.ndarray:
    """fp32 h from the bf16 outputs g, u of w1 and w3 (clamps, silu, optional route weight)."""
    g = np.minimum(np.asarray(g, dtype=F32), CLAMP)
    u = np.clip(np.asarray(u, dtype=F32), -CLAMP, CLAMP)
    h = psilu(g) * u
    if route_weight is not None:
        h = np.asarray(route_weight, dtype=F32)[:, None] * h
    return h


def expert_hidden(xq: QAct, w1, w3, route_weight=None) -> QAct:
    """hq = act_qdq(bf16(h)): the quantized input of w2."""
    g = linear(xq, w1, "bfloat16")
    u = linear(xq, w3, "bfloat16")
    return act_qdq(to_bf16(swiglu(g, u, route_weight)))


def expert(xq: QAct, w1, w3, w2, route_weight=None, out: str = "float32") -> np.ndarray:
    """y [T, D]: the expert's output (fp32 partial, or bf16 when `out` says so)."""
    return linear(expert_hidden(xq, w1, w3, route_weight), w2, out)
