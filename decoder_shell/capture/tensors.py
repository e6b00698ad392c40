"""torch <-> numpy without changing a bit (bf16 travels as its uint16 pattern; ml_dtypes reads it)."""

from __future__ import annotations

import numpy as np
import torch

from ..contracts.numerics import BF16, F32

_NUMPY = {torch.bfloat16: BF16, torch.float32: F32}
_BITS = {torch.bfloat16: torch.uint16, torch.float32: torch.int32}  # same-width views that keep every bit


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A host copy of `t` as numpy, same dtype and bits (bf16 -> ml_dtypes.bfloat16)."""
    t = t.detach()
    if t.dtype not in _NUMPY:
        raise TypeError(f"capture records bfloat16 and float32 tensors, not {t.dtype}")
    host = t.to("cpu", copy=True).contiguous().view(_BITS[t.dtype])
    return host.numpy().view(_NUMPY[t.dtype])


def to_torch(a: np.ndarray, like: torch.Tensor | None = None) -> torch.Tensor:
    """numpy bf16/fp32 -> torch, same bits, on `like`'s device."""
    a = np.ascontiguousarray(a)
    if a.dtype == BF16:
        t = torch.from_numpy(a.view(np.uint16).copy()).view(torch.bfloat16)
    elif a.dtype == F32:
        t = torch.from_numpy(a.copy())
    else:
        raise TypeError(f"expected bfloat16 or float32, not {a.dtype}")
    return t if like is None else t.to(like.device)

