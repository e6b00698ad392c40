"""Weighted RMSNorm contract: y = bf16((x * r) * w), r = 1 / sqrt(lane_sum(x*x) / D + eps)."""

from __future__ import annotations

import numpy as np

from .numerics import F32, lane_sum, to_bf16


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """x [..., D] bf16 or fp32, weight [D] fp32 -> bf16, in the lane order of numerics.lane_sum."""
    xf = np.asarray(x, dtype=F32)
    r = np.float32(1.0) / np.sqrt(lane_sum(xf * xf) / np.float32(xf.shape[-1]) + np.float32(eps))
    return to_bf16((xf * r[..., None]) * np.asarray(weight, dtype=F32))
