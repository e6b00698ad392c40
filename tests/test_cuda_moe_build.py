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


def test_spread_kernels_fit_their_registers_without_spilling_much(tmp_path, monkeypatch, capsys):
    """ptxas's report of every expert linear kernel (printed: registers, spills, static shared memory);
    the spread kernels must keep static plus dynamic shared memory under the 48 KiB a block gets
    without opting in, and spill at most a few bytes."""
    nvrtc_or_skip()
    from decoder_shell.drivers.cuda.nvrtc import ptxas_report
    report = ptxas_report(moe.source(), "sm_90", name="moe.cu")
    with capsys.disabled():
        print("\nkernel                    regs  spill st/ld  smem")
        for name in sorted(n for n in report if n.startswith(("moe_up", "moe_down"))):
            r = report[name]
            print(f"{name:25s} {r['registers']:4d}  {r['spill_stores']:4d}/{r['spill_loads']:<4d}   {r.get('smem', 0)}")
    for stage in ("up", "down"):
        for fmt in moe.FORMATS:
            r = report[f"moe_{stage}_spread_{fmt}"]
            # static shared memory plus the largest dynamic size a launch gives: no opt-in needed
            assert 0 < r["registers"] <= 255 and r.get("smem", 0) + 4 * moe.SPREAD_SMEM_FLOATS <= 48 * 1024
            assert r["spill_stores"] <= 16 and r["spill_loads"] <= 16, r


def test_spread_constants_match_the_kernel_source():
    """moe.py sizes the spread kernel's dynamic shared memory with the kernel's own constants."""
    import re
    src = (moe.HERE / "moe_routed.cu").read_text()
    assert int(re.search(r"#define SP_SMEM_FLOATS (\d+)", src).group(1)) == moe.SPREAD_SMEM_FLOATS
    assert int(re.search(r"#define SP_MAX_BATCH (\d+)", src).group(1)) == moe.SPREAD_MAX_BATCH
    assert int(re.search(r"#define SP_UP_ROWS (\d+)", src).group(1)) == moe.spread_rows(2)
    assert int(re.search(r"#define SP_DOWN_ROWS (\d+)", src).group(1)) == moe.spread_rows(1)
    assert "__launch_bounds__(256, MIN_BLOCKS)" in src and moe.SPREAD_THREADS == 256
    # up at K = 5120: one slot of 5120 + 2 x 16 x 160 floats; down at K = 1152: four of 1152 + 32 x 36
    assert moe.spread_shared_bytes(5120, 2) == 4 * 10240 and moe.spread_shared_bytes(1152, 1) == 4 * 4 * 2304


def _prmt(a: int, b: int, sel: int) -> int:
    """PTX prmt.b32 (default mode): byte k = byte (nibble k & 7) of {b, a}, sign-replicated when bit 3."""
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    out = 0
    for k in range(4):
        nib = (sel >> (4 * k)) & 0xF
        v = src[nib & 7]
        out |= ((0xFF if v & 0x80 else 0) if nib & 8 else v) << (8 * k)
    return out


def test_spread_e2m1_byte_permutes_give_the_decode_table():
    """The table-free E2M1 decode of moe_routed.cu (its constants read from the source, its prmt
    sequence modelled instruction by instruction) gives ml_dtypes' value bits for all 16 nibbles in every
    position, all 65536 16-bit nibble quadruples included."""
    import re
    from decoder_shell.drivers.cuda.moe import HERE
    src = (HERE / "moe_routed.cu").read_text()
    c = {n: int(v, 16) for n, v in re.findall(r"#define (E2M1_\w+) (0x[0-9A-F]+)u", src)}
    sel = re.findall(r"prmt\((lo|w4), (hi|w), (0x[0-9A-F]+)u\)", src)
    pairs = [int(s, 16) for a, _, s in sel if a == "lo"]
    signs = [int(s, 16) for a, _, s in sel if a == "w4"]
    assert len(pairs) == 2 and len(signs) == 2, sel

    def x4(mags, sgn):
        hi = _prmt(c["E2M1_HI0"], c["E2M1_HI1"], mags) | (sgn & 0x80808080)
        lo = _prmt(c["E2M1_LO0"], c["E2M1_LO1"], mags)
        out = []
        for p in (_prmt(lo, hi, pairs[0]), _prmt(lo, hi, pairs[1])):
            out += [(p << 16) & 0xFFFFFFFF, p & 0xFFFF0000]
        return out

    def x8(w):
        m, w4 = w & 0x77777777, (w << 4) & 0xFFFFFFFF
        return x4(m & 0xFFFF, _prmt(w4, w, signs[0])) + x4(m >> 16, _prmt(w4, w, signs[1]))

    table = decode_tables()[256:].view(np.uint32)
    for half in range(1 << 16):
        for w in (half, half << 16):
            want = [int(table[(w >> (4 * k)) & 0xF]) for k in range(8)]
            assert x8(w) == want, hex(w)


def test_spread_e4m3_bit_move_gives_the_decode_table():
    """(b & 0x7F) << 20 with the sign at bit 31, times 2^120 in fp32, is ml_dtypes' E4M3 value of every
    non-NaN code (numpy's fp32 multiply keeps subnormal inputs, as --ftz=false does)."""
    b = np.array([x for x in range(256) if x & 0x7F != 0x7F], np.uint32)
    enc = (((b & 0x7F) << 20) | ((b & 0x80) << 24)).astype(np.uint32).view(np.float32)
    got = (enc * np.float32(2.0 ** 120)).view(np.uint32)
    assert np.array_equal(got, decode_tables()[b].view(np.uint32))
    assert int(0x7B800000) == int(np.float32(2.0 ** 120).view(np.uint32))  # the kernel's 2^120 constant


def test_packed_products_are_exact_in_fp32():
    """The premise of the spread kernels' fmaf: every E4M3 x E2M1 and E4M3 x E4M3 code product (all
    non-NaN pairs) is exact in fp32 and a normal number or zero, so fmaf(q, w, acc) = acc + fl(q * w)
    with one rounding (and the zero signs of an addition)."""
    t = decode_tables().astype(np.float64)
    e4 = t[[x for x in range(256) if x & 0x7F != 0x7F]]
    for w in (t[256:], e4):
        exact = np.multiply.outer(e4, w)
        f32 = np.multiply.outer(e4.astype(np.float32), w.astype(np.float32))
        assert np.array_equal(f32.astype(np.float64), exact)
        mag = np.abs(exact[exact != 0])
        assert mag.min() >= np.finfo(np.float32).tiny and mag.max() < 2.0 ** 18
        assert np.array_equal(np.signbit(f32), np.signbit(exact))


def test_gate_kernels_fit_1024_threads_without_spilling(tmp_path, monkeypatch):
    """Both gate kernels (row, and split for every group size built) build for 1024-thread blocks with no
    spill (the split gate's point is speed); the split gate that runs is one of those built."""
    nvrtc_or_skip()
    from decoder_shell.drivers.cuda.nvrtc import ptxas_report
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    assert moe.GATE_GROUP in moe.GATE_GROUPS
    report = ptxas_report(moe.source(), "sm_90", name="moe.cu")
    for name in ("moe_gate", *(f"moe_gate_split_g{g}" for g in moe.GATE_GROUPS)):
        r = report[name]
        assert 0 < r["registers"] <= 64 and r["spill_stores"] == 0 and r["spill_loads"] == 0, (name, r)
