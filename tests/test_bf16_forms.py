"""The integer bf16 rounding of the CUDA kernels (kernels.cu f2bf_int) against the contracts' ml_dtypes.

On the GPU, tools/bf16_check.py checks every one of the 2^32 fp32 inputs of f2bf (the hardware's
conversion with its NaN fixed by a select) against f2bf_int; here f2bf_int's arithmetic, transliterated
to numpy, is checked against contracts.numerics.to_bf16 (ml_dtypes): every sign, exponent and high
mantissa byte with the low half at the rounding's edges, and arbitrary patterns. The CUDA source is read
to keep the transliteration the kernels' own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoder_shell.contracts.numerics import to_bf16
from decoder_shell.drivers.cuda.kernels import SOURCE

EDGES = np.array([0x0000, 0x0001, 0x3fff, 0x7ffe, 0x7fff, 0x8000, 0x8001, 0xbfff, 0xfffe, 0xffff], dtype=np.uint32)


def f2bf_int(u: np.ndarray) -> np.ndarray:
    """kernels.cu f2bf_int on uint32 patterns: NaN -> its sign | 0x7fc0, else (u + 0x7fff + lsb) >> 16."""
    u = np.asarray(u, dtype=np.uint32)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    return np.where(nan, (((u >> np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7FC0)).astype(np.uint16), r)


def contract_bits(u: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return to_bf16(np.asarray(u, dtype=np.uint32).view(np.float32)).view(np.uint16)


def test_the_transliteration_is_the_kernels():
    body = SOURCE[SOURCE.index("bf16_t f2bf_int(float f)"):]
    body = body[:body.index("\n}")]
    assert "if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_nan(f);" in body
    nan = SOURCE[SOURCE.index("bf16_t bf16_nan(float f)"):].split("\n", 1)[0]
    assert "(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7fc0u)" in nan
    assert "u += 0x7fffu + ((u >> 16) & 1u);" in body and "return (bf16_t)(u >> 16);" in body


def test_every_high_half_at_the_rounding_edges():
    hi = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    u = (hi[:, None] | EDGES[None, :]).ravel()
    got, want = f2bf_int(u), contract_bits(u)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [hex(int(x)) for x in u[bad[:8]]]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=256))
def test_arbitrary_patterns(words):
    u = np.array(words, dtype=np.uint32)
    assert np.array_equal(f2bf_int(u), contract_bits(u))


def test_the_device_check_builds(tmp_path, monkeypatch):
    """tools/bf16_check.py's kernel (f2bf, f2bf_int and the paired f2bf2 over every input) compiles with the
    kernels' exact flags: a GPU run must not find a build error."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "tools"))
    import bf16_check
    from device_checks import SOURCE as CHECK_SOURCE
    assert "f2bf2(f, o)" in bf16_check.KERNEL and "f2bf2(o, f)" in bf16_check.KERNEL
    assert b"bf16_check" in compile_cubin(CHECK_SOURCE + bf16_check.KERNEL, "sm_90", EXACT_FLAGS, "bf16_check.cu")
