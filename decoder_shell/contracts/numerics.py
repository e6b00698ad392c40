"""Portable fp32 building blocks shared by every contract.

Every function uses only IEEE-754 fp32 +, -, *, / and sqrt, each rounded on its own (no fused
multiply-add), so a GPU kernel written with __fadd_rn/__fmul_rn/__fdiv_rn/__fsqrt_rn (or OpenCL C
with FP_CONTRACT OFF) reproduces every bit. The exact orders are documented in docs/CONTRACTS.md.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

F32 = np.dtype(np.float32)
BF16 = np.dtype(ml_dtypes.bfloat16)
#: dtype names as manifests and geometries write them.
DTYPES = {"bfloat16": BF16, "float32": F32, "uint8": np.dtype(np.uint8), "int32": np.dtype(np.int32)}


def dtype_of(name: str) -> np.dtype:
    return DTYPES[name]

#: Lanes of every long fp32 reduction: lane l sums elements l, l+LANES, l+2*LANES, ... in order,
#: then lanes combine in an adjacent-pair tree ((l0+l1)+(l2+l3))+... (a warp shuffle-down tree).
LANES = 1024

_f = np.float32
EXP_LO = _f(-87.0)
EXP_HI = _f(88.0)
LOG2E = _f(1.44269502162933349609375)
ROUND_MAGIC = _f(12582912.0)  # 1.5 * 2**23: (t + M) - M rounds t to the nearest integer, ties to even
LN2_HI = _f(0.693359375)  # 9 significant bits: n * LN2_HI is exact for |n| <= 128
LN2_LO = _f(-2.12194440e-4)
#: Taylor coefficients 1/k! for k = 7..0, Horner order.
EXP_POLY = tuple(_f(c) for c in (1 / 5040, 1 / 720, 1 / 120, 1 / 24, 1 / 6, 1 / 2, 1.0, 1.0))


def to_bf16(x: np.ndarray) -> np.ndarray:
    """Round fp32 to bf16, round-to-nearest-even (ml_dtypes does the rounding)."""
    return np.asarray(x, dtype=F32).astype(BF16)


def pexp(x: np.ndarray) -> np.ndarray:
    """Portable exp(x) in fp32.

    x is clamped to [-87, 88] (fminf/fmaxf semantics), n = rint(x*log2e) by the magic-number trick,
    r = (x - n*LN2_HI) - n*LN2_LO, p = Horner(EXP_POLY, r), result = p * 2**n with 2**n built from
    its exponent bits (exact, always a normal number in this range).
    """
    x = np.asarray(x, dtype=F32)
    # fminf(NaN, 88) = 88 for every NaN, signaling ones too: numpy's fmin returns a signaling NaN's quiet copy in
    # its scalar loop (an array's last len % 16 elements) and 88 in its vector loop, so NaN is replaced explicitly
    x = np.where(np.isnan(x), EXP_HI, np.maximum(np.minimum(x, EXP_HI), EXP_LO))
    n = (x * LOG2E + ROUND_MAGIC) - ROUND_MAGIC
    r = (x - n * LN2_HI) - n * LN2_LO
    p = np.full_like(r, EXP_POLY[0])
    for c in EXP_POLY[1:]:
        p = p * r + c
    scale = ((n.astype(np.int32) + 127) << 23).view(F32)
    return p * scale


def psigmoid(z: np.ndarray, exp=None) -> np.ndarray:
    """sigmoid(z) = 1 / (1 + pexp(-z)) in fp32 (`exp` replaces pexp: the gate's inexact variants)."""
    z = np.asarray(z, dtype=F32)
    return _f(1.0) / (_f(1.0) + (exp or pexp)(-z))


def lane_sum(terms: np.ndarray, lanes: int = LANES) -> np.ndarray:
    """Sum the last axis in the fixed lane order (see LANES); returns fp32 with that axis removed.

    Missing lanes (length not a multiple of `lanes`) contribute +0.0, which changes no bits: every
    lane accumulator starts at +0.0 and can never become -0.0.
    """
    if lanes < 1 or lanes & (lanes - 1):
        raise ValueError(f"lane count must be a power of two, not {lanes}")
    terms = np.asarray(terms, dtype=F32)
    n = terms.shape[-1]
    k = -(-n // lanes) if n else 0
    pad = k * lanes - n
    if pad:
        terms = np.concatenate([terms, np.zeros(terms.shape[:-1] + (pad,), F32)], axis=-1)
    blocks = terms.reshape(terms.shape[:-1] + (k, lanes))
    acc = np.zeros(terms.shape[:-1] + (lanes,), F32)
    for j in range(k):
        acc = acc + blocks[..., j, :]
    while acc.shape[-1] > 1:
        acc = acc[..., 0::2] + acc[..., 1::2]
    return acc[..., 0]


def seq_sum(terms: np.ndarray, axis: int) -> np.ndarray:
    """Sum a short axis strictly left to right: ((t0 + t1) + t2) + ..."""
    terms = np.moveaxis(np.asarray(terms, dtype=F32), axis, 0)
    acc = terms[0].copy()
    for t in terms[1:]:
        acc = acc + t
    return acc


#: log1p(u) = 2 * atanh(f), f = u / (2 + u): odd-series coefficients 1/(2j+1) for j = 9..0, Horner in f^2.
LOG1P_POLY = tuple(_f(1.0 / (2 * j + 1)) for j in range(9, -1, -1))


def plog1p(u: np.ndarray) -> np.ndarray:
    """Portable log(1 + u) for u in [0, 1], written with + - * / only (f <= 1/3, so 10 terms of
    the atanh series leave a truncation error far below an fp32 ulp):
    f = u / (2 + u); s = f*f; p = Horner(LOG1P_POLY, s); result = (2*f) * p."""
    u = np.asarray(u, dtype=F32)
    f = u / (_f(2.0) + u)
    s = f * f
    p = np.full_like(f, LOG1P_POLY[0])
    for c in LOG1P_POLY[1:]:
        p = p * s + c
    return (_f(2.0) * f) * p


def psoftplus(x: np.ndarray) -> np.ndarray:
    """Portable softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|), with `x > 0 ? x : 0`
    (so -0.0 gives +0.0 before the addition) and pexp / plog1p above."""
    x = np.asarray(x, dtype=F32)
    return np.where(x > 0, x, _f(0.0)).astype(F32) + plog1p(pexp(-np.abs(x)))


def psilu(g: np.ndarray) -> np.ndarray:
    """Portable silu(g) = g / (1 + pexp(-g)) in fp32."""
    g = np.asarray(g, dtype=F32)
    return g / (_f(1.0) + pexp(-g))
