"""The MoE CUDA kernels compile through NVRTC for sm_90 (a build error fails), and what the host side
hands them (decode tables, constants, struct layout) is what the contracts use."""

from __future__ import annotations

import ctypes as C

import numpy as np
import pytest

from decoder_shell.contracts.numerics import LOG1P_POLY
from decoder_shell.contracts.quant import decode_tables
from decoder_shell.drivers.cuda import moe


def nvrtc_or_skip():
    try:
        from cuda.bindings import nvrtc
        nvrtc.nvrtcVersion()
    except Exception as e:  # the toolchain itself missing is a skip; a failing build is not
        pytest.skip(f"NVRTC not installed ({e})")


def test_moe_kernels_build_for_sm90(tmp_path, monkeypatch):
    nvrtc_or_skip()
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    cubin = moe.build("sm_90")
    assert cubin[:4] == b"\x7fELF"
    for name in (*moe.KERNELS, *moe.DENSE_KERNELS):
        assert name.encode() in cubin, name


def test_constants_are_the_contract_bits():
    text = moe.constants()
    for j, c in enumerate(LOG1P_POLY):
        assert f"LOG1P_C{j} __uint_as_float(0x{int(np.float32(c).view(np.uint32)):08x}u)" in text
    for name, v in (("AMAX_FLOOR", 1e-4), ("INV_E4M3_MAX", 1 / 448), ("GATE_EPS", 1e-20)):
        assert f"#define {name} __uint_as_float(0x{int(np.float32(v).view(np.uint32)):08x}u)" in text


def test_tables_decode_every_code():
    t = decode_tables()
    assert t.shape == (272,) and t.dtype == np.float32
    assert t[0x38] == 1.0 and t[0x7E] == 448.0 and np.isnan(t[0x7F]) and t[0x80] == 0.0 and np.signbit(t[0x80])
    assert list(t[256:264]) == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0] and t[256 + 9] == -0.5


def test_struct_layout_matches_the_kernel():
    # 4 pointers, 3 ints (+4 padding), 2 pointers, 5 long longs, 2 ints, 2 pointers, 1 int (+4 padding)
    assert C.sizeof(moe.MoeLin) == 4 * 8 + 3 * 4 + 4 + 2 * 8 + 5 * 8 + 2 * 4 + 2 * 8 + 4 + 4
    assert moe.MoeLin.w.offset == 48 and moe.MoeLin.K.offset == 104 and moe.MoeLin.out.offset == 112
    assert moe.MoeLin.experts.offset == 128


def test_struct_layout_is_checked_by_the_compiler(tmp_path, monkeypatch):
    """Every ctypes offset of MoeLin and its size, as static_asserts compiled with moe.cu (a build
    error fails); an assert off by 8 bytes must fail the build."""
    nvrtc_or_skip()
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin
    from decoder_shell.errors import BuildError
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    asserts = [f"static_assert(sizeof(MoeLin) == {C.sizeof(moe.MoeLin)}, \"MoeLin size\");"]
    asserts += [f"static_assert(__builtin_offsetof(MoeLin, {f}) == {getattr(moe.MoeLin, f).offset}, \"MoeLin.{f}\");"
                for f, _ in moe.MoeLin._fields_]
    src = moe.source() + "\n".join(asserts) + "\n"
    assert compile_cubin(src, "sm_90", EXACT_FLAGS, name="moe.cu")[:4] == b"\x7fELF"
    bad = f"static_assert(sizeof(MoeLin) == {C.sizeof(moe.MoeLin) + 8}, \"MoeLin size\");\n"
    with pytest.raises(BuildError, match="MoeLin size"):
        compile_cubin(moe.source() + bad, "sm_90", EXACT_FLAGS, name="moe.cu")
