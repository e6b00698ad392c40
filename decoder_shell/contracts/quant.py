"""Shared pieces of the quantized formats: the ml_dtypes element types and the bad-input error.

E4M3 (float8_e4m3fn), E8M0 (float8_e8m0fnu) and E2M1 (float4_e2m1fn) are ml_dtypes' types; every
conversion between them and fp32 goes through ml_dtypes (no hand-written bit decoding).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..errors import UsageError
from .numerics import F32

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
E2M1 = np.dtype(ml_dtypes.float4_e2m1fn)
U8 = np.dtype(np.uint8)
#: Elements per scale group along K (and per side of an FP8 weight block).
GROUP = 32
#: E8M0 byte 255 is NaN; every decoder refuses it.
E8M0_NAN = 255


class QuantInputError(UsageError):
    """Quantized input outside its format (a NaN scale byte, a NaN code, a shape off the 32-grid):
    the CLI prints one line and exits 2."""


def e8m0_values(scales: np.ndarray, what: str = "scale") -> np.ndarray:
    """E8M0 bytes -> fp32 powers of two 2^(b-127), through ml_dtypes; byte 255 (NaN) is refused."""
    b = np.asarray(scales)
    if b.dtype != U8:
        raise QuantInputError(f"{what}: E8M0 scales must be uint8 bytes, not {b.dtype}")
    if b.size and int(b.max()) == E8M0_NAN:
        i = np.unravel_index(int(np.argmax(b == E8M0_NAN)), b.shape)
        raise QuantInputError(f"{what}: E8M0 scale byte 255 (NaN) at index {tuple(int(v) for v in i)}")
    return b.view(E8M0).astype(F32)


def e8m0_exponents(scales: np.ndarray, what: str = "scale") -> np.ndarray:
    """The unbiased exponents b - 127 as int32 (after the same NaN check)."""
    e8m0_values(scales, what)
    return np.asarray(scales).astype(np.int32) - 127


def decode_tables() -> np.ndarray:
    """fp32 [256 + 16]: every E4M3 byte's value, then every E2M1 nibble's, decoded by ml_dtypes (what
    the device kernels index instead of decoding; the E4M3 NaN bytes decode to NaN, never valid codes)."""
    e4 = np.arange(256, dtype=np.uint8).view(E4M3).astype(F32)
    e2 = np.arange(16, dtype=np.uint8).view(E2M1).astype(F32)
    return np.concatenate([e4, e2]).astype(F32)


def check_grid(n: int, what: str) -> None:
    if n % GROUP:
        raise QuantInputError(f"{what} is {n}, not a multiple of {GROUP} (the scale grid)")
