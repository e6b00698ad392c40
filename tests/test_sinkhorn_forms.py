"""The Sinkhorn forms (sinkhorn.cu SINKHORN_FORM) and div_by, proven on the CPU.

div_by replaces __fdiv_rn where one denominator divides several values: it runs the per-quotient
half of __fdiv_rn's sm_90 fast path (q0 = a*y, q = q0 + y*(a - b*q0)) on a reciprocal y made once
(y = y0 + y0*(1 - b*y0) from the hardware's approximate y0). The SASS shows that fast path is
__fdiv_rn's instruction for instruction (so the bits are __fdiv_rn's wherever its FCHK passes, which
an operand range check does inside div_by's 2^-60 <= |a|, |b| < 2^60); here the sequence also runs
with an exact fp32 FMA (numpy, TwoSum) and gives numpy's correctly rounded quotient with the
correctly rounded reciprocal, and on a million random pairs with either neighbour of it; the
`regs-shared` and `lanes-fast` Sinkhorn transliterated with it equal contracts.mhc.sinkhorn bit for bit. The forms
build for sm_90 without spills or stack; the device check is tools/sinkhorn_bench.py.
"""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

f32, f64 = np.float32, np.float64
TOOLS = Path(__file__).resolve().parents[1] / "tools"


def fma32(a, b, c):
    """fp32 fused multiply-add, correctly rounded: a*b is exact in fp64, TwoSum gives a*b + c as s + err
    exactly, and the one case where rounding s to fp32 differs from rounding s + err (s exactly halfway
    between two fp32 values, err != 0) is decided by err's sign."""
    a, b, c = (np.asarray(x, f32).astype(f64) for x in (a, b, c))
    p = a * b
    s = p + c
    bp = s - c
    err = (p - bp) + (c - (s - bp))
    r = s.astype(f32)
    lo = np.where(r.astype(f64) > s, np.nextafter(r, f32(-np.inf)), r)
    hi = np.nextafter(lo, f32(np.inf))
    tie = (s == (lo.astype(f64) + hi.astype(f64)) / 2) & (err != 0)
    return np.where(tie, np.where(err > 0, hi, lo), r).astype(f32)


def div_by(a, b, y0):
    """kernels.cu recip + div_by's fast path, with y0 as the hardware's reciprocal."""
    b = np.asarray(b, f32)
    y = fma32(y0, fma32(-b, y0, f32(1)), y0)
    q0 = (np.asarray(a, f32) * y).astype(f32)
    return fma32(y, fma32(-b, q0, a), q0)


def div_short(a, b, y0):
    """sinkhorn.cu div_short: the estimate a * y0 refined beside the reciprocal, then div_by's last step."""
    a, b = np.asarray(a, f32), np.asarray(b, f32)
    e, q1 = fma32(-b, y0, f32(1)), (a * y0).astype(f32)
    y1, q0 = fma32(y0, e, y0), fma32(q1, e, q1)
    return fma32(y1, fma32(-b, q0, a), q0)


def exact_round(x: Fraction) -> np.float32:
    """Round a rational to the nearest fp32 (ties to even), for normal results."""
    lo = f32(float(x))  # within an ulp: pick the nearest of it and its neighbours exactly
    cands = [np.nextafter(lo, f32(-np.inf)), lo, np.nextafter(lo, f32(np.inf))]
    best = min(cands, key=lambda c: (abs(Fraction(float(c)) - x), int(np.asarray(c).view(np.uint32)) & 1))
    return f32(best)


def binade_floats(lo_exp=67, hi_exp=187):
    """fp32 values 2^-60 <= |v| < 2^60 with any mantissa, biased toward its ends (div_by's range)."""
    mant = st.one_of(st.integers(0, (1 << 23) - 1), st.integers(0, 3), st.integers((1 << 23) - 4, (1 << 23) - 1))
    return st.builds(lambda e, m, s: f32(np.uint32((e << 23) | m).view(f32) * (-1 if s else 1)),
                     st.integers(lo_exp, hi_exp - 1), mant, st.booleans())


@settings(max_examples=300, deadline=None)
@given(a=st.floats(-2.0 ** 60, 2.0 ** 60, width=32), b=st.floats(-2.0 ** 60, 2.0 ** 60, width=32), c=st.floats(-2.0 ** 60, 2.0 ** 60, width=32))
def test_fma32_is_the_exactly_rounded_fused_multiply_add(a, b, c):
    got = fma32(f32(a), f32(b), f32(c))
    want = exact_round(Fraction(float(f32(a))) * Fraction(float(f32(b))) + Fraction(float(f32(c))))
    if want == 0:  # a rational has no signed zero: the value only
        assert got == 0
    elif abs(float(want)) >= 2.0 ** -126:  # normal results (the division's range)
        assert got.view(np.uint32) == want.view(np.uint32)


def test_fma32_rounds_a_double_rounding_tie_by_the_residual():
    # (1 + 2^-23)(1 - 2^-23) + (2^24 + 2) = 2^24 + 3 - 2^-46: fp64 rounds it to 2^24 + 3, a tie between
    # the fp32 neighbours 2^24 + 2 and 2^24 + 4 that plain rounding would send to the even 2^24 + 4
    a, b, c = f32(1 + 2 ** -23), f32(1 - 2 ** -23), f32(2 ** 24 + 2)
    assert f32(float(a) * float(b) + float(c)) == f32(2 ** 24 + 4)
    assert fma32(a, b, c) == f32(2 ** 24 + 2)
    assert fma32(a, f32(-float(b)), f32(-(2 ** 24 + 2))) == f32(-(2 ** 24 + 2))


def _reciprocals(b):
    r = (f32(1) / b).astype(f32)
    return np.nextafter(r, f32(-np.inf)), r, np.nextafter(r, f32(np.inf))


@pytest.mark.parametrize("quotient", [div_by, div_short], ids=["div_by", "div_short"])
@settings(max_examples=400, deadline=None)
@given(a=binade_floats(), b=binade_floats())
def test_the_fast_quotients_are_correctly_rounded_with_the_correctly_rounded_reciprocal(quotient, a, b):
    want = f32(a) / f32(b)
    y0 = (f32(1) / np.asarray([b], f32)).astype(f32)
    got = quotient(np.asarray([a], f32), np.asarray([b], f32), y0)
    assert got.view(np.uint32)[0] == np.asarray(want, f32).view(np.uint32), (a, b)


@pytest.mark.parametrize("quotient", [div_by, div_short], ids=["div_by", "div_short"])
def test_the_fast_quotients_match_division_on_a_million_operand_pairs_over_every_binade(quotient):
    """Random pairs (not the hard ties below): correct for the reciprocal and both its neighbours (the
    device check, tools/div_check.py, takes the hardware's own estimate over every mantissa pair)."""
    rng = np.random.default_rng(26)
    n = 1 << 20
    e = rng.integers(67, 187, (2, n)).astype(np.uint32)
    m = rng.integers(0, 1 << 23, (2, n)).astype(np.uint32)
    m[1, : n // 8] = (1 << 23) - 1 - rng.integers(0, 4, n // 8).astype(np.uint32)  # b just below a power of 2
    m[0, n // 8: n // 4] = rng.integers(0, 4, n // 8).astype(np.uint32)
    a, b = ((e << 23) | m).view(f32)
    a = a * np.where(rng.random(n) < 0.5, -1, 1).astype(f32)
    want = (a / b).view(np.uint32)
    for y0 in _reciprocals(b):
        assert int((quotient(a, b, y0).view(np.uint32) != want).sum()) == 0


def test_div_short_is_the_kernels_sequence():
    """The transliteration above is sinkhorn.cu's div_short, line for line, and the lanes-fast form takes it
    unless a build sets SINKHORN_DIV_SHORT=0."""
    from decoder_shell.drivers.cuda.kernels import SOURCE
    assert "const float e = __fmaf_rn(-b, y0, 1.0f), q1 = __fmul_rn(a, y0);" in SOURCE
    assert "const float y1 = __fmaf_rn(y0, e, y0), q0 = __fmaf_rn(q1, e, q1);" in SOURCE
    assert "return __fmaf_rn(y1, __fmaf_rn(-b, q0, a), q0);" in SOURCE
    assert "#define SINKHORN_DIV_SHORT 1" in SOURCE


def test_a_near_miss_that_random_pairs_pass_and_the_whole_check_does_not():
    """tools/div_check.py's near miss, div_shorter (the correction applied to the first estimate itself,
    one FMA shorter than div_short), is right on the million random pairs with any of three reciprocals,
    yet the device found 20,581 of the 2^46 mantissa pairs wrong (H200, 2026-12-04). Its first four, here
    with a reciprocal one ulp from the correctly rounded one: div_shorter misses each, div_short does not."""
    def div_shorter(a, b, y0):
        q1, e = (a * y0).astype(f32), fma32(-b, y0, f32(1))
        return fma32(fma32(y0, e, y0), fma32(-b, q1, a), q1)
    found = [(1.3384802, 1.3503233, 0), (1.3268414, 1.3614649, 2), (1.2842637, 1.3617722, 2), (1.3477355, 1.3618208, 2)]
    for a, b, which in found:
        a, b = np.asarray([a], f32), np.asarray([b], f32)
        ys = _reciprocals(b)
        assert div_shorter(a, b, ys[which])[0] != a[0] / b[0]
        assert all(div_short(a, b, y)[0] == a[0] / b[0] for y in ys)


def test_div_short_needs_the_hardware_estimate_as_div_by_does():
    """The tie below is missed by div_short too with a reciprocal one ulp low: its proof is the device's
    (every mantissa pair against __fdiv_rn, and the estimate's scaling over the range's exponents)."""
    a = np.asarray([2.0 ** -60], f32)
    b = np.asarray([np.uint32((67 << 23) | ((1 << 23) - 1))], np.uint32).view(f32)
    rn = (f32(1) / b).astype(f32)
    assert div_short(a, b, rn)[0] == a[0] / b[0] == f32(0.5 + 2 ** -24)
    assert div_short(a, b, np.nextafter(rn, f32(0)))[0] == f32(0.5)


def test_a_reciprocal_one_ulp_off_can_miss_a_tie():
    """Why the device check matters: the sequence (also __fdiv_rn's own fast path) is correctly rounded
    with the correctly rounded reciprocal, but with y0 one ulp below it a quotient just above a tie can
    round down: 2^-60 / (2^-60 * (2 - 2^-23)) = 0.5 * (1 + 2^-24 + ...) -> 0.5 + 2^-24, not 0.5. So the
    hardware reciprocal's accuracy is part of the proof: tools/sinkhorn_bench.py compares div_by and
    __fdiv_rn with numpy on the device, including denominators with an all-ones mantissa."""
    a = np.asarray([2.0 ** -60], f32)
    b = np.asarray([np.uint32((67 << 23) | ((1 << 23) - 1))], np.uint32).view(f32)
    rn = (f32(1) / b).astype(f32)
    assert div_by(a, b, rn)[0] == a[0] / b[0] == f32(0.5 + 2 ** -24)
    assert div_by(a, b, np.nextafter(rn, f32(0)))[0] == f32(0.5)


def test_div_by_range_check_sends_the_rest_to_fdiv_rn():
    """The bounds in kernels.cu's div_safe: |v| bits - bits(2^-60) < bits(2^60) - bits(2^-60)."""
    from decoder_shell.drivers.cuda.kernels import SOURCE
    assert "(__float_as_uint(v) & 0x7fffffffu) - 0x21800000u < 0x3c000000u" in SOURCE
    bits = lambda v: int(np.asarray(f32(v)).view(np.uint32)) & 0x7FFFFFFF  # noqa: E731
    safe = lambda v: (bits(v) - 0x21800000) % (1 << 32) < 0x3C000000  # noqa: E731
    assert safe(2.0 ** -60) and not safe(np.nextafter(f32(2.0 ** -60), f32(0))) and safe(-(2.0 ** 59) * 1.99)
    assert not safe(2.0 ** 60) and not safe(0.0) and not safe(np.inf) and not safe(1e-40) and not safe(np.nan)


def _sass(src: str, tmp_path, monkeypatch) -> str:
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin, disassemble
    from decoder_shell.errors import DriverUnavailable
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    try:
        return disassemble(compile_cubin(src, "sm_90", EXACT_FLAGS))
    except DriverUnavailable as e:
        pytest.fail(str(e))


def _float_ops(text: str, kernel: str) -> list[str]:
    from decoder_shell.drivers.cuda.nvrtc import sass_instructions, sass_opcode
    ops = []
    for _, ins in sass_instructions(text, kernel):
        name, args = sass_opcode(ins)
        if name == "EXIT":
            break
        if name.startswith(("MUFU", "FFMA", "FMUL", "FCHK")):
            ops.append(f"{name} {args}")
    return ops


def test_div_by_fast_path_is_fdiv_rn_fast_path_instruction_for_instruction(tmp_path, monkeypatch):
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.kernels import SOURCE
    k = ('extern "C" __global__ void kdiv(const float* a, const float* b, float* o) '
         '{ o[threadIdx.x] = __fdiv_rn(a[threadIdx.x], b[threadIdx.x]); }\n'
         'extern "C" __global__ void kby(const float* a, const float* b, float* o) '
         '{ o[threadIdx.x] = div_by(a[threadIdx.x], recip(b[threadIdx.x])); }\n')
    text = _sass(SOURCE + k, tmp_path, monkeypatch)
    ref = [o.split(" ")[0] for o in _float_ops(text, "kdiv")]
    by = [o.split(" ")[0] for o in _float_ops(text, "kby")]
    # __fdiv_rn: MUFU.RCP, FCHK, 2 FFMA (reciprocal), 3 FFMA (quotient)
    assert ref[:7] == ["MUFU.RCP", "FCHK", "FFMA", "FFMA", "FFMA", "FFMA", "FFMA"], ref
    # div_by: the same reciprocal, then a*y (FMUL = FFMA with +0 for nonzero a), 2 FFMA; its fallback
    # is __fdiv_rn's own sequence
    fast = [o for o in by if o != "FCHK"]
    assert fast[:6] == ["MUFU.RCP", "FFMA", "FFMA", "FMUL", "FFMA", "FFMA"], by
    assert "FCHK" in by  # the fallback keeps __fdiv_rn's check and slow path


# --- the builds --------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["lanes", "regs", "regs-shared", "lanes-fast"])
def test_every_form_builds_for_sm90_without_spills(form, monkeypatch, tmp_path):
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.kernels import SINKHORN_FORMS, SOURCE
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, ptxas_report
    from decoder_shell.drivers.cuda.persistent import PERSISTENT_SOURCE, source
    from pathlib import Path
    flags = (*EXACT_FLAGS, f"-DSINKHORN_FORM={SINKHORN_FORMS[form]}")
    bench = Path(__file__).resolve().parents[1] / "tools" / "sinkhorn_bench.cu"
    src, entry = source(4, 4)  # kernels.py's SOURCE + persistent.cu + the persistent instance; the bench after it
    assert src.startswith(SOURCE + PERSISTENT_SOURCE)
    import sys
    sys.path.insert(0, str(bench.parent))
    import ctypes as C
    from sinkhorn_bench import BenchArgs
    layout = "".join(f"static_assert(__builtin_offsetof(BenchArgs, {f}) == {getattr(BenchArgs, f).offset}, \"{f}\");\n"
                     for f, _ in BenchArgs._fields_) + f"static_assert(sizeof(BenchArgs) == {C.sizeof(BenchArgs)}, \"size\");\n"
    rep = ptxas_report(src + bench.read_text() + layout, "sm_90", flags, "sinkhorn_bench.cu")
    for name in ("sinkhorn_bench", "sinkhorn_contended", "sinkhorn_kernel", entry):
        r = rep[name]
        print(form, name, r)
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack"] == 0, (form, name, r)


def test_ptxas_report_fails_on_a_compile_error():
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, ptxas_report
    from decoder_shell.errors import BuildError
    with pytest.raises(BuildError, match="undefined_name"):
        ptxas_report('extern "C" __global__ void k() { undefined_name(); }', "sm_90", EXACT_FLAGS)


def test_the_default_form_is_the_one_kernels_cu_builds_without_a_flag():
    import re
    from decoder_shell.drivers.cuda.kernels import DEFAULT_SINKHORN, SINKHORN_FORMS, SOURCE
    m = re.search(r"#ifndef SINKHORN_FORM\n#define SINKHORN_FORM (\d+)", SOURCE)
    assert m and int(m.group(1)) == SINKHORN_FORMS[DEFAULT_SINKHORN]


def test_the_form_is_chosen_by_the_environment_and_a_bad_name_is_one_line(monkeypatch):
    from decoder_shell.drivers.cuda.kernels import sinkhorn_flags
    from decoder_shell.errors import UsageError
    monkeypatch.delenv("DECODER_SHELL_CUDA_SINKHORN", raising=False)
    assert sinkhorn_flags() == ()
    monkeypatch.setenv("DECODER_SHELL_CUDA_SINKHORN", "lanes")
    assert sinkhorn_flags() == ("-DSINKHORN_FORM=0",)
    monkeypatch.setenv("DECODER_SHELL_CUDA_SINKHORN", "regs-shared")
    assert sinkhorn_flags() == ("-DSINKHORN_FORM=2",)
    monkeypatch.setenv("DECODER_SHELL_CUDA_SINKHORN", "fast")
    with pytest.raises(UsageError) as e:
        sinkhorn_flags()
    assert "\n" not in str(e.value) and "regs-shared" in str(e.value)


def test_bench_reference_is_the_contract_on_its_own_inputs():
    """tools/sinkhorn_bench.py's expected values: the contract's sinkhorn and mhc_split on the mixes of
    the partials in the boundary's tree order (one row recomputed here term by term)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import sinkhorn_bench as B
    from decoder_shell.contracts.mhc import DEFAULT, mhc_split
    logits, part, base, scale, da, db = B.inputs(64)
    comb, post, comb2 = B.expected(logits, part, base, scale)
    assert np.isfinite(comb).all() and np.isfinite(comb2).all() and np.isfinite(post).all()
    p = part[5]
    v = [((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]))][0].astype(f32)
    mix = (v[1:] * (f32(1) / np.sqrt(v[0] / f32(B.HC_D) + f32(DEFAULT.norm_eps)))).astype(f32)
    _, want_post, want_comb = mhc_split(mix[None], base, scale, 4, DEFAULT)
    assert (post[5].view(np.uint32) == want_post[0].view(np.uint32)).all()
    assert (comb2[5].view(np.uint32) == want_comb[0].reshape(16).view(np.uint32)).all()


def test_a_bench_build_sets_the_form_and_the_late_weights_and_restores_the_environment(monkeypatch):
    import os
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from bench_replay import FORMS, sinkhorn_form
    from decoder_shell.drivers.cuda.kernels import sinkhorn_flags
    from decoder_shell.drivers.cuda.persistent import late_flags
    monkeypatch.delenv("DECODER_SHELL_CUDA_SINKHORN", raising=False)
    monkeypatch.setenv("DECODER_SHELL_CUDA_PERSIST_LATE", "0")
    assert "regs-shared+late" in FORMS and "lanes" in FORMS
    with sinkhorn_form("regs-shared+late"):
        assert sinkhorn_flags() == ("-DSINKHORN_FORM=2",) and late_flags() == ("-DPERSIST_LATE_WEIGHTS=1",)
    with sinkhorn_form("regs"):
        assert sinkhorn_flags() == ("-DSINKHORN_FORM=1",) and late_flags() == ()
    assert "DECODER_SHELL_CUDA_SINKHORN" not in os.environ and os.environ["DECODER_SHELL_CUDA_PERSIST_LATE"] == "0"
    assert sinkhorn_flags() == () and late_flags() == ()


def test_late_weights_build_for_sm90_without_spills():
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, ptxas_report
    from decoder_shell.drivers.cuda.persistent import source
    src, entry = source(8, 4)  # the build every dsv4-flash cycle gets (8 outputs a unit, D = 4096)
    r = ptxas_report(src, "sm_90", (*EXACT_FLAGS, "-DPERSIST_LATE_WEIGHTS=1", "-DSINKHORN_FORM=2"), "persistent.cu")[entry]
    print(entry, r)
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack"] == 0


def test_every_kind_of_graph_kernel_instance_compiles_with_the_shared_reciprocal_form(tmp_path, monkeypatch):
    """The graph path's callers of sinkhorn_lane (boundary kernels with the comb inline, the cluster
    kernel, the Sinkhorn node) in the `regs-shared` form, every kind of instance (test_cuda_build's set)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_cuda_build import _every_spec
    from decoder_shell.drivers.cuda import kernels as K
    from decoder_shell.drivers.cuda import nvrtc as N
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    specs = _every_spec()
    cubin = N.compile_cubin(K.SOURCE + "".join(sp.wrapper() for sp in specs), "sm_90",
                            (*N.EXACT_FLAGS, "-DSINKHORN_FORM=2"))
    for name in [*K.ENTRIES, *(sp.entry for sp in specs)]:
        assert name.encode() in cubin, name


def _div_by_or_div(a, b):
    """kernels.cu div_by with the correctly rounded reciprocal, __fdiv_rn (numpy's division) outside its range."""
    bits = lambda v: np.asarray(v, f32).view(np.uint32) & np.uint32(0x7FFFFFFF)  # noqa: E731
    safe = lambda v: (bits(v) - np.uint32(0x21800000)) < np.uint32(0x3C000000)  # noqa: E731
    with np.errstate(all="ignore"):
        y0 = (f32(1) / np.asarray(b, f32)).astype(f32)
        fast = div_by(a, np.broadcast_to(b, np.shape(a)), np.broadcast_to(y0, np.shape(a)))
        return np.where(safe(a) & safe(b), fast, (np.asarray(a, f32) / b).astype(f32)).astype(f32)


def _sinkhorn_regs_shared(logits, eps, iters):
    """sinkhorn_lane's `regs-shared` form, transliterated: the softmax front as the lane form, then
    sinkhorn_regs: column sums, div_by per entry, (row, column) x (iters - 1), each sum left to right + eps."""
    c = np.asarray(logits, f32).reshape(-1, 4, 4)
    e = _pexp(c - c.max(axis=-1, keepdims=True))
    s = ((e[..., 0] + e[..., 1]) + e[..., 2]) + e[..., 3]
    c = (e / s[..., None]).astype(f32) + f32(eps)
    for it in range(2 * iters - 1):
        if it % 2 == 0:
            s = (((c[:, 0, :] + c[:, 1, :]) + c[:, 2, :]) + c[:, 3, :]) + f32(eps)
            c = _div_by_or_div(c, np.broadcast_to(s[:, None, :], c.shape))
        else:
            s = (((c[:, :, 0] + c[:, :, 1]) + c[:, :, 2]) + c[:, :, 3]) + f32(eps)
            c = _div_by_or_div(c, np.broadcast_to(s[:, :, None], c.shape))
    return c


def _pexp(x):
    from decoder_shell.contracts.numerics import pexp
    return pexp(x)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), lo=st.integers(-40, 12), eps_exp=st.sampled_from([-6, -3, -20, None]))
def test_shared_reciprocal_sinkhorn_equals_the_contract(seed, lo, eps_exp):
    """The `regs-shared` Sinkhorn (with the correctly rounded reciprocal) is the contract's bit for bit,
    over logits of many binades and hc_eps values including 0 (tiny entries then take the fallback)."""
    from decoder_shell.contracts.mhc import MhcParams, sinkhorn
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((64, 4, 4)) * np.exp2(rng.uniform(lo, lo + 8, (64, 1, 1)))).astype(f32)
    logits[::5] = logits[::5, :1, :1]
    p = MhcParams(hc_eps=0.0 if eps_exp is None else 2.0 ** eps_exp)
    with np.errstate(all="ignore"):
        want = sinkhorn(logits, p)
        got = _sinkhorn_regs_shared(logits, p.hc_eps, p.sinkhorn_iters)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all()


def _in_range(v):
    """sinkhorn.cu div_range(v) < 0x3c000000: 2^-60 <= v < 2^60 and v positive (no abs: a negative value,
    -0 included, is out of range)."""
    return (np.asarray(v, f32).view(np.uint32) - np.uint32(0x21800000)) < np.uint32(0x3C000000)


def _sinkhorn_fast(logits, eps, iters, quotient=div_short):
    """sinkhorn_lane's `lanes-fast` form, transliterated: every quotient by div_short (SINKHORN_DIV_SHORT 0: div_fast, div_by's fast path with no check), each
    operand's range folded into a flag a comb, and where any operand of a comb was out of range that
    comb made again by the lane form (__fdiv_rn, numpy's division)."""
    c = np.asarray(logits, f32).reshape(-1, 4, 4)
    e = _pexp(c - c.max(axis=-1, keepdims=True))
    s = ((e[..., 0] + e[..., 1]) + e[..., 2]) + e[..., 3]
    ok = _in_range(s) & _in_range(e).all(axis=-1)
    with np.errstate(all="ignore"):
        fast = lambda a, b: quotient(a, b, (f32(1) / b).astype(f32))  # noqa: E731
        r = fast(e, np.broadcast_to(s[..., None], e.shape)) + f32(eps)
        for it in range(2 * iters - 1):
            axis = -2 if it % 2 == 0 else -1  # columns first
            s = np.sum(np.moveaxis(r, axis, 0)[:1], axis=0)
            for i in range(1, 4):
                s = s + np.moveaxis(r, axis, 0)[i]
            s = s + f32(eps)
            b = np.expand_dims(s, axis)
            ok &= _in_range(b).all(axis=(-2, -1)).reshape(-1, 1) & _in_range(r).all(axis=-1)
            r = fast(r, np.broadcast_to(b, r.shape))
        lanes = _sinkhorn_lanes(logits, eps, iters)
    return np.where(ok.all(axis=-1)[:, None, None], r, lanes).astype(f32), ok.all(axis=-1)


def _sinkhorn_lanes(logits, eps, iters):
    """the lane form: __fdiv_rn per entry, each sum left to right + eps."""
    c = np.asarray(logits, f32).reshape(-1, 4, 4)
    e = _pexp(c - c.max(axis=-1, keepdims=True))
    s = ((e[..., 0] + e[..., 1]) + e[..., 2]) + e[..., 3]
    c = (e / s[..., None]).astype(f32) + f32(eps)
    for it in range(2 * iters - 1):
        if it % 2 == 0:
            c = c / ((((c[:, 0, :] + c[:, 1, :]) + c[:, 2, :]) + c[:, 3, :]) + f32(eps))[:, None, :]
        else:
            c = c / ((((c[:, :, 0] + c[:, :, 1]) + c[:, :, 2]) + c[:, :, 3]) + f32(eps))[:, :, None]
    return c


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), lo=st.integers(-40, 12), eps_exp=st.sampled_from([-6, -3, -20, None]),
       quotient=st.sampled_from([div_short, div_by]))
def test_fast_quotient_forms_equal_the_contract(seed, lo, eps_exp, quotient):
    """The `lanes-fast` Sinkhorn (fast quotients, one range flag a comb, the lane form where it is raised) is the contract's bit for bit, with either quotient; with hc_eps 0 or tiny logits' spread some combs take the fallback."""
    from decoder_shell.contracts.mhc import MhcParams, sinkhorn
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((64, 4, 4)) * np.exp2(rng.uniform(lo, lo + 8, (64, 1, 1)))).astype(f32)
    logits[::5] = logits[::5, :1, :1]
    p = MhcParams(hc_eps=0.0 if eps_exp is None else 2.0 ** eps_exp)
    with np.errstate(all="ignore"):
        want = sinkhorn(logits, p)
        got, _ = _sinkhorn_fast(logits, p.hc_eps, p.sinkhorn_iters, quotient)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all()


def test_fast_quotient_forms_fall_back_only_for_the_comb_with_an_operand_out_of_range():
    """Real-scale logits keep every operand far inside div_by's range: no comb takes the fallback. A row
    whose logits spread by 400 has an exp clamped at e^-87 (~2^-125) as a numerator: that comb, and only
    it, is made by the lane form, and the result is still the contract's."""
    from decoder_shell.contracts.mhc import DEFAULT, sinkhorn
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((32, 4, 4)) * 4).astype(f32)
    with np.errstate(all="ignore"):
        _, ok = _sinkhorn_fast(logits, DEFAULT.hc_eps, DEFAULT.sinkhorn_iters)
        assert ok.all()
        logits[3, 1] = [200.0, -200.0, 0.0, 0.0]
        got, ok = _sinkhorn_fast(logits, DEFAULT.hc_eps, DEFAULT.sinkhorn_iters)
    assert not ok[3] and ok[np.arange(32) != 3].all()
    assert (got.view(np.uint32) == sinkhorn(logits, DEFAULT).view(np.uint32)).all()


def _div_check(*args):
    return subprocess.run([sys.executable, str(TOOLS / "div_check.py"), *args], capture_output=True, text=True,
                          timeout=300)


def test_the_division_check_kernels_build_for_sm90():
    """tools/div_check.py's kernels (div_short and the reciprocal's scaling over kernels.py's SOURCE) compile: a
    build error here is a failure, not a skip."""
    sys.path.insert(0, str(TOOLS))
    import div_check
    from decoder_shell.drivers.cuda.kernels import SOURCE
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, ptxas_report
    rep = ptxas_report(SOURCE + div_check.KERNEL, "sm_90", EXACT_FLAGS, "div_check.cu")
    assert {"div_check", "rcp_scaling"} <= set(rep)
    assert all(rep[k].get("spill_stores", 0) == 0 for k in ("div_check", "rcp_scaling"))


@pytest.mark.parametrize("n", ["0", "8388609", "-3"])
def test_the_division_check_refuses_a_bad_count_in_one_line(n):
    r = _div_check("--denominators", n)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "--denominators" in lines[0] and "Traceback" not in r.stderr


def test_the_division_check_without_a_gpu_is_one_line_exit_3():
    from decoder_shell.drivers import get_driver
    from decoder_shell.errors import DriverUnavailable
    try:
        get_driver("cuda")
        pytest.skip("a CUDA device is present: tests/test_cuda.py runs the check")
    except DriverUnavailable:
        pass
    r = _div_check("--denominators", "16")
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 3 and len(lines) == 1 and lines[0].startswith("div_check:") and "Traceback" not in r.stderr
