"""act_qdq: the activation quantize-dequantize the model runs before every FP8/FP4 linear.

Per 32 consecutive inputs of a row (official `act_quant(x, 32, "ue8m0")`):
  amax = max(max_k |x_k|, 1e-4)                          (fp32)
  v    = fl(amax * fl(1/448))
  s    = 2^ceil(log2 v)                                  (from v's exponent: +1 unless v is a power of two)
  q    = e4m3_rne(clamp(fl(x / s), -448, 448))           (ml_dtypes' RNE conversion)
  out  = bf16(q * s)                                     (exact: q has 4 significant bits)
The codes q (E4M3 bytes) and scales (E8M0 bytes, s = 2^(b-127)) are what a packed GEMM consumes; the
bf16 `q * s` is the same value for a GEMM over decoded operands.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .numerics import F32, to_bf16
from .quant import E4M3, GROUP, U8, QuantInputError, check_grid, e8m0_values

_f = np.float32
AMAX_FLOOR = _f(1e-4)
INV_E4M3_MAX = _f(1.0 / 448.0)
E4M3_MAX = _f(448.0)


@dataclass(frozen=True)
class QAct:
    """A quantized activation: codes uint8 E4M3 [..., K], scales uint8 E8M0 [..., K/32]."""

    codes: np.ndarray
    scales: np.ndarray

    def code_values(self) -> np.ndarray:
        return self.codes.view(E4M3).astype(F32)

    def scale_values(self) -> np.ndarray:
        return e8m0_values(self.scales, "activation scales")

    def dequant(self) -> np.ndarray:
        """bf16 q * s (each group's scale repeated over its 32 codes)."""
        return to_bf16(self.code_values() * np.repeat(self.scale_values(), GROUP, axis=-1))


def scale_bytes(amax: np.ndarray) -> np.ndarray:
    """E8M0 bytes of s = 2^ceil(log2(fl(amax * fl(1/448)))); amax >= 1e-4 keeps v a normal number."""
    v = np.asarray(amax, dtype=F32) * INV_E4M3_MAX
    m, e = np.frexp(v)  # v = m * 2^e, m in [0.5, 1)
    exp = np.where(m == _f(0.5), e - 1, e)
    return (exp + 127).astype(U8)


def act_qdq(x: np.ndarray) -> QAct:
    """Quantize x (bf16 or fp32, [..., K], K a multiple of 32) to E4M3 codes with E8M0 group scales."""
    xf = np.asarray(x, dtype=F32)
    check_grid(xf.shape[-1], "activation width")
    if not np.isfinite(xf).all():
        raise QuantInputError("activation holds a NaN or infinity; act_qdq needs finite inputs")
    groups = xf.reshape(xf.shape[:-1] + (xf.shape[-1] // GROUP, GROUP))
    amax = np.maximum(np.abs(groups).max(axis=-1), AMAX_FLOOR)
    sb = scale_bytes(amax)
    s = e8m0_values(sb, "activation scales")
    q = np.clip(groups / s[..., None], -E4M3_MAX, E4M3_MAX).astype(E4M3)
    return QAct(q.view(U8).reshape(xf.shape), sb)


def act_qdq_bf16(x: np.ndarray) -> np.ndarray:
    """The bf16 value the model continues with: bf16(q * s)."""
    return act_qdq(x).dequant()
