"""FP8 E4M3 weights with one E8M0 scale per 32x32 block (the draft's dense and shared-expert matrices).

codes uint8 [N, K]: E4M3 (float8_e4m3fn) bytes; 0x7F / 0xFF are NaN and refused.
scales uint8 [N/32, K/32]: E8M0, value 2^(b-127); byte 255 is refused. N and K are multiples of 32.
Decoded weight w[n, k] = e4m3(code) * 2^(b[n/32, k/32]-127).
"""

from __future__ import annotations

import numpy as np

from .numerics import F32
from .quant import E4M3, GROUP, U8, QuantInputError, check_grid, e8m0_exponents


def code_values(codes: np.ndarray) -> np.ndarray:
    c = np.asarray(codes)
    if c.dtype != U8:
        raise QuantInputError(f"FP8 codes must be uint8, not {c.dtype}")
    if c.size and bool(((c & 0x7F) == 0x7F).any()):
        raise QuantInputError("FP8 weight holds an E4M3 NaN code (0x7F or 0xFF)")
    return c.view(E4M3).astype(F32)


def check_shapes(codes: np.ndarray, scales: np.ndarray) -> tuple[int, int]:
    if codes.ndim != 2 or scales.ndim != 2:
        raise QuantInputError(f"FP8 weight needs 2-D codes and scales, got {codes.shape} and {scales.shape}")
    n, k = codes.shape
    check_grid(n, "FP8 output rows")
    check_grid(k, "FP8 input width")
    if scales.shape != (n // GROUP, k // GROUP):
        raise QuantInputError(f"FP8 scales are {scales.shape}, expected {(n // GROUP, k // GROUP)} for codes {codes.shape}")
    return n, k


def scale_exponents(scales: np.ndarray) -> np.ndarray:
    """Per (row, K group) exponents [N, K/32]: each block row's scales repeated over its 32 rows."""
    return np.repeat(e8m0_exponents(scales, "FP8 block scales"), GROUP, axis=0)
