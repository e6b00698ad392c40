"""The MoE draft kernels (moe.cu): source assembly, NVRTC build, the ml_dtypes decode tables, and the
argument struct mirrored in ctypes.

The source is kernels.cu's arithmetic prelude (everything up to and including `psigmoid`: ADD/MUL/DIV,
bf16 rounding, pexp, PDL waits), the contracts' fp32 constants as exact bit patterns, then moe.cu: the
MoE kernels share every bit of arithmetic with the mHC kernels instead of restating it.
"""

from __future__ import annotations

import ctypes as C
from pathlib import Path

import numpy as np

from ...contracts.act_qdq import AMAX_FLOOR, INV_E4M3_MAX
from ...contracts.moe_gate import NORM_EPS
from ...contracts.numerics import F32, LOG1P_POLY
from ...contracts.quant import E2M1, E4M3
from .api import CudaError
from .nvrtc import EXACT_FLAGS, compile_cubin

HERE = Path(__file__).parent
PRELUDE_END = "__device__ __forceinline__ float psigmoid"
WARPS = 8  # MOE_WARPS: output rows per block of the linear kernels
FORMATS = {"mxfp4": 0, "fp8": 1, "bf16": 2}
KERNELS = ("moe_qdq", "moe_gate", "moe_combine",
           *(f"moe_{s}_{f}" for s in ("up", "down") for f in FORMATS))


def _bits(v) -> str:
    return f"__uint_as_float(0x{int(np.asarray(v, F32).view(np.uint32)):08x}u)"


def constants() -> str:
    """#defines of the contracts' fp32 constants, bit for bit (no decimal literal re-rounding)."""
    lines = [f"#define LOG1P_C{j} {_bits(c)}" for j, c in enumerate(LOG1P_POLY)]
    lines += [f"#define AMAX_FLOOR {_bits(AMAX_FLOOR)}", f"#define INV_E4M3_MAX {_bits(INV_E4M3_MAX)}",
              f"#define GATE_EPS {_bits(NORM_EPS)}"]
    return "\n".join(lines) + "\n"


def source() -> str:
    base = (HERE / "kernels.cu").read_text()
    at = base.find(PRELUDE_END)
    if at < 0:
        raise CudaError("kernels.cu no longer defines psigmoid: the MoE kernels cannot take its prelude")
    prelude = base[:base.index("\n", at) + 1]
    return prelude + constants() + (HERE / "moe.cu").read_text()


def build(arch: str = "sm_90") -> bytes:
    """NVRTC cubin of every MoE kernel (exact flags); a build error raises CudaError."""
    return compile_cubin(source(), arch, EXACT_FLAGS, name="moe.cu")


def tables() -> np.ndarray:
    """fp32 [256 + 16]: every E4M3 byte's value, then every E2M1 nibble's, decoded by ml_dtypes
    (the E4M3 NaN bytes decode to NaN and are never valid codes)."""
    e4 = np.arange(256, dtype=np.uint8).view(E4M3).astype(F32)
    e2 = np.arange(16, dtype=np.uint8).view(E2M1).astype(F32)
    return np.concatenate([e4, e2]).astype(F32)


u64 = C.c_uint64


class MoeLin(C.Structure):
    """Mirror of `struct MoeLin` in moe.cu (passed by value)."""

    _fields_ = [("xc", u64), ("xs", u64), ("ids", u64), ("rw", u64), ("rows", C.c_int), ("topk", C.c_int),
                ("act_per_slot", C.c_int), ("w", u64), ("s", u64),
                ("w_estride", C.c_longlong), ("w_mstride", C.c_longlong), ("w_rstride", C.c_longlong),
                ("s_estride", C.c_longlong), ("s_mstride", C.c_longlong),
                ("K", C.c_int), ("N", C.c_int), ("out", u64), ("tables", u64)]


def strides(fmt: str, experts: int, mats: int, n: int, k: int) -> dict:
    """Byte strides of a weight stack [experts, mats, n, k] (codes) and its scales."""
    row = {"mxfp4": k // 2, "fp8": k, "bf16": 2 * k}[fmt]
    srow = {"mxfp4": (n, k // 32), "fp8": (n // 32, k // 32), "bf16": (0, 0)}[fmt]
    smat = srow[0] * srow[1]
    return dict(w_rstride=row, w_mstride=row * n, w_estride=row * n * mats, s_mstride=smat, s_estride=smat * mats)
