"""MXFP4 weights: packed E2M1 nibbles with one E8M0 scale per 32 inputs of each output row.

codes uint8 [N, K/2]: byte j of a row holds input 2j in the low nibble and input 2j+1 in the high
nibble; a nibble is an E2M1 value (0, .5, 1, 1.5, 2, 3, 4, 6; bit 3 the sign, 0b1000 = -0).
scales uint8 [N, K/32]: E8M0, value 2^(b-127); byte 255 (NaN) is refused.
Decoded weight w[n, k] = e2m1(code) * 2^(b[n, k/32]-127), exact in fp32 and bf16 for every
scale byte a linear accepts (qlinear's domain check).
"""

from __future__ import annotations

import numpy as np

from .numerics import F32
from .quant import E2M1, GROUP, U8, QuantInputError, check_grid, e8m0_exponents


def unpack_codes(codes: np.ndarray) -> np.ndarray:
    """uint8 [..., K/2] -> E2M1 code values as fp32 [..., K] (low nibble first), via ml_dtypes."""
    c = np.asarray(codes)
    if c.dtype != U8:
        raise QuantInputError(f"MXFP4 codes must be uint8, not {c.dtype}")
    nib = np.stack([c & 0x0F, c >> 4], axis=-1).reshape(c.shape[:-1] + (2 * c.shape[-1],))
    return nib.view(E2M1).astype(F32)


def pack_codes(nibbles: np.ndarray) -> np.ndarray:
    """uint8 nibbles [..., K] (values 0..15) -> packed bytes [..., K/2] (the inverse of unpack)."""
    n = np.asarray(nibbles, dtype=U8)
    if n.shape[-1] % 2 or (n.size and int(n.max()) > 15):
        raise QuantInputError("MXFP4 nibbles must be 0..15 and an even count per row")
    return (n[..., 0::2] | (n[..., 1::2] << 4)).astype(U8)


def check_shapes(codes: np.ndarray, scales: np.ndarray) -> tuple[int, int]:
    """(N, K) of an MXFP4 weight, after checking that codes and scales agree on the 32-grid."""
    if codes.ndim != 2 or scales.ndim != 2:
        raise QuantInputError(f"MXFP4 weight needs 2-D codes and scales, got {codes.shape} and {scales.shape}")
    n, k = codes.shape[0], 2 * codes.shape[1]
    check_grid(k, "MXFP4 input width")
    if scales.shape != (n, k // GROUP):
        raise QuantInputError(f"MXFP4 scales are {scales.shape}, expected {(n, k // GROUP)} for codes {codes.shape}")
    return n, k


def scale_exponents(scales: np.ndarray) -> np.ndarray:
    """Per (row, K group) exponents [N, K/32] (a row's own scales)."""
    return e8m0_exponents(scales, "MXFP4 scales")
