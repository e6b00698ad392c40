"""The quantized linear: y = a . W^T over an act_qdq'd activation and an MXFP4 or FP8 block weight.

Fixed fp32 order (one warp per output row on a GPU: lane l owns K groups l, l+32, l+64, ...):
  P[t, n, j] = seq_sum_{i=0..31} fl(qa[t, 32j+i] * qw[n, 32j+i])   group j's exact code products,
                                                                  left to right from the first
  P[t, n, j] = fl(P[t, n, j] * fl(s_a[t, j] * s_w[n, j]))         times the two power-of-two scales
  y[t, n]    = lane_sum(P[t, n, :], lanes=32)                     lane l adds groups l, l+32, ... from
                                                                  +0.0, then the adjacent-pair tree
  out        = bf16(y)  (or y itself: the fp32 partial of a rank's K slice)
Packed (codes and scales) and expanded (weights decoded once to bf16, activation as bf16 q*s) give the
same bits: every product a*w = qa*qw*S is exact, and scaling by a power of two commutes with every
fp32 rounding while all values stay normal. `qlinear` checks that domain: every exponent sum
e_a + e_w lies in [SCALE_EXP_MIN, SCALE_EXP_MAX], so each nonzero partial sum is at least
2^-18 * 2^-100 (a normal number) and at most 2^23 * 2^90 * (K/32) (finite for K < 2^15).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import fp8block, mxfp4
from .act_qdq import QAct
from .numerics import BF16, F32, lane_sum, to_bf16
from .quant import GROUP, QuantInputError, check_grid

#: Lanes of the cross-group sum (a warp).
GROUP_LANES = 32
SCALE_EXP_MIN, SCALE_EXP_MAX = -100, 90
FORMATS = ("mxfp4", "fp8")
#: Rows of W per vectorized step: bounds the [T, rows, K/32] temporaries.
_CHUNK_ELEMS = 1 << 22


@dataclass(frozen=True)
class QWeight:
    """A quantized weight [N, K]: format "mxfp4" (packed nibbles, row scales) or "fp8" (32x32 blocks)."""

    format: str
    codes: np.ndarray
    scales: np.ndarray

    def __post_init__(self):
        if self.format not in FORMATS:
            raise QuantInputError(f"weight format must be one of {FORMATS}, not {self.format!r}")
        self._mod.check_shapes(self.codes, self.scales)

    @property
    def _mod(self):
        return mxfp4 if self.format == "mxfp4" else fp8block

    @property
    def shape(self) -> tuple[int, int]:
        return self._mod.check_shapes(self.codes, self.scales)

    def code_values(self) -> np.ndarray:
        """fp32 [N, K]: the codes' values without their scales."""
        return mxfp4.unpack_codes(self.codes) if self.format == "mxfp4" else fp8block.code_values(self.codes)

    def exponents(self) -> np.ndarray:
        """int32 [N, K/32]: the scale exponent of every (row, K group)."""
        return self._mod.scale_exponents(self.scales)

    def rows(self, lo: int, hi: int) -> "QWeight":
        """Output rows [lo, hi) (FP8: whole 32-row blocks)."""
        if self.format == "fp8":
            check_grid(lo, "FP8 row cut")
            check_grid(hi, "FP8 row cut")
            return QWeight("fp8", self.codes[lo:hi], self.scales[lo // GROUP:hi // GROUP])
        return QWeight("mxfp4", self.codes[lo:hi], self.scales[lo:hi])

    def cols(self, lo: int, hi: int) -> "QWeight":
        """Inputs [lo, hi), on the 32-grid (MXFP4: packed bytes [lo/2, hi/2))."""
        check_grid(lo, "input cut")
        check_grid(hi, "input cut")
        if self.format == "fp8":
            return QWeight("fp8", self.codes[:, lo:hi], self.scales[:, lo // GROUP:hi // GROUP])
        return QWeight("mxfp4", self.codes[:, lo // 2:hi // 2], self.scales[:, lo // GROUP:hi // GROUP])

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.scales.nbytes)


def expand(w: QWeight) -> np.ndarray:
    """Decode once to bf16 [N, K]: code * 2^e, refused unless exact in bf16 (no overflow, no rounding)."""
    values = w.code_values() * np.ldexp(np.float32(1.0), np.repeat(w.exponents(), GROUP, axis=1)).astype(F32)
    out = to_bf16(values)
    if not np.array_equal(out.astype(F32), values):
        raise QuantInputError(f"{w.format} weight: a decoded value is not exact in bf16 (scale out of range)")
    return out


def group_sums(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """P [T, N, K/32]: per 32-group, the fp32 products summed left to right from the first."""
    t, k = a.shape
    n = w.shape[0]
    j = k // GROUP
    av = a.reshape(t, 1, j, GROUP)
    out = np.empty((t, n, j), F32)
    step = max(1, _CHUNK_ELEMS // max(1, t * k))
    for lo in range(0, n, step):
        wv = w[lo:lo + step].reshape(1, -1, j, GROUP)
        acc = av[..., 0] * wv[..., 0]
        for i in range(1, GROUP):
            acc = acc + av[..., i] * wv[..., i]
        out[:, lo:lo + step] = acc
    return out


def _finish(p: np.ndarray, out: str) -> np.ndarray:
    y = lane_sum(p, lanes=GROUP_LANES)
    if out == "bfloat16":
        return to_bf16(y)
    if out == "float32":
        return y
    raise ValueError(f"linear output must be bfloat16 or float32, not {out!r}")


def _check_operands(t_k: tuple, n_k: tuple, what: str) -> None:
    if len(t_k) != 2 or len(n_k) != 2:
        raise QuantInputError(f"{what}: activation and weight must be 2-D, got {t_k} and {n_k}")
    if t_k[1] != n_k[1]:
        raise QuantInputError(f"{what}: activation width {t_k[1]} differs from weight input width {n_k[1]}")
    check_grid(t_k[1], f"{what} input width")


def check_domain(e_a: np.ndarray, e_w: np.ndarray) -> None:
    """Refuse scale exponents whose sums leave [SCALE_EXP_MIN, SCALE_EXP_MAX] (see module doc)."""
    if not e_a.size or not e_w.size:
        return
    lo = int((e_a.min(axis=0) + e_w.min(axis=0)).min())
    hi = int((e_a.max(axis=0) + e_w.max(axis=0)).max())
    if lo < SCALE_EXP_MIN or hi > SCALE_EXP_MAX:
        raise QuantInputError(f"linear scales out of range: activation + weight exponents span [{lo}, {hi}], "
                              f"the exact domain is [{SCALE_EXP_MIN}, {SCALE_EXP_MAX}]")


def qlinear(a: QAct, w: QWeight, out: str = "bfloat16") -> np.ndarray:
    """Packed: E4M3 activation codes x weight codes per group, times s_a * s_w (see module doc)."""
    _check_operands(a.codes.shape, w.shape, "linear")
    e_a = a.scales.astype(np.int32) - 127
    e_w = w.exponents()
    a.scale_values()  # refuses NaN scale bytes
    check_domain(e_a, e_w)
    p = group_sums(a.code_values(), w.code_values())
    s = a.scale_values()[:, None, :] * np.ldexp(np.float32(1.0), e_w).astype(F32)[None, :, :]
    return _finish(p * s, out)


def qlinear_expanded(a: np.ndarray, w: np.ndarray, out: str = "bfloat16") -> np.ndarray:
    """Expanded: bf16 activation (q*s) and bf16 weight (decoded once); exact products per group."""
    a = np.asarray(a)
    w = np.asarray(w)
    if a.dtype != BF16 or w.dtype != BF16:
        raise QuantInputError(f"expanded linear takes bf16 operands, got {a.dtype} and {w.dtype}")
    _check_operands(a.shape, w.shape, "expanded linear")
    return _finish(group_sums(a.astype(F32), w.astype(F32)), out)


def linear(a: QAct, w, out: str = "bfloat16") -> np.ndarray:
    """qlinear for a QWeight, qlinear_expanded (on a.dequant()) for a bf16 weight array."""
    if isinstance(w, QWeight):
        return qlinear(a, w, out)
    return qlinear_expanded(a.dequant(), w, out)
