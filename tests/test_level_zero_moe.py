"""The level-zero driver's MoE SPIR-V kernels (kernels/moe.cl) against the numpy contracts, bit for bit,
on random cases (Intel's OpenCL CPU runtime here; skipped without the intel runtime except under CI)."""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoder_shell.contracts.act_qdq import QAct, act_qdq
from decoder_shell.contracts.expert import expert, swiglu
from decoder_shell.contracts.moe import ExpertWeights, combine_slots, official_epilogue, routed_slots
from decoder_shell.contracts.moe_gate import moe_gate
from decoder_shell.contracts.numerics import F32, to_bf16
from decoder_shell.contracts.qlinear import QWeight, expand, linear
from decoder_shell.contracts.quant import decode_tables as tables
from decoder_shell.drivers.cuda.moe import strides
from decoder_shell.errors import DriverUnavailable
from decoder_shell.replay.compare import bits

SETTINGS = settings(max_examples=8, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
U8 = np.uint8


@pytest.fixture(scope="module")
def target():
    from decoder_shell.drivers.level_zero import LevelZeroDriver
    try:
        return LevelZeroDriver().target
    except DriverUnavailable as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"level-zero driver unavailable here: {e}")


class Dev:
    def __init__(self, t):
        import dpctl.memory
        self.t, self.q, self.mem = t, t.queue, dpctl.memory

    def buf(self, a=None, nbytes=None):
        nb = a.nbytes if a is not None else nbytes
        m = self.mem.MemoryUSMDevice(max(int(nb), 1), queue=self.q)
        if a is not None and a.nbytes:
            m.copy_from_host(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
        return m

    def get(self, m, shape, dtype):
        out = np.empty(shape, dtype)
        m.copy_to_host(out.reshape(-1).view(np.uint8))
        return out

    def run(self, name, args, n):
        self.q.submit(self.t.program.get_sycl_kernel(name), args, [max(-(-n // 16) * 16, 16)], [16])


u32, u64 = ctypes.c_uint32, ctypes.c_uint64


def qdq(dev, tab, x):
    rows, k = x.shape
    xb, c, s = dev.buf(x.view(np.uint16)), dev.buf(nbytes=x.size), dev.buf(nbytes=x.size // 32)
    dev.run("moe_qdq", [xb, c, s, tab, u32(rows), u32(k)], rows * k // 32)
    return c, s, dev.get(c, x.shape, U8), dev.get(s, (rows, k // 32), U8)


def lin(dev, tab, fmt, xc, xs, ids, rw, rows, topk, act_per_slot, w, s, experts, mats, n, k, swiglu_epi):
    st_ = strides(fmt, experts, mats, n, k)
    slots = rows * topk if ids is not None else rows
    out = dev.buf(nbytes=slots * n * (2 if swiglu_epi else 4))
    dummy = dev.buf(nbytes=4)
    args = [xc, xs, ids if ids is not None else dummy, rw if rw is not None else dummy, u32(rows), u32(topk),
            u32(act_per_slot), u32(ids is not None), u32(rw is not None), w, s if s is not None else dummy,
            *(u64(st_[f]) for f in ("w_estride", "w_mstride", "w_rstride", "s_estride", "s_mstride")),
            u32(k), u32(n), u32(experts), u32({"mxfp4": 0, "fp8": 1, "bf16": 2}[fmt]), u32(swiglu_epi), out, tab]
    dev.run("moe_linear", args, experts * n)
    return out


@SETTINGS
@given(st.integers(1, 6), st.sampled_from([32, 64, 96]), st.sampled_from([1, 3, 5]), st.sampled_from([32, 64]),
       st.integers(0, 2**31 - 1))
def test_moe_kernels_match_contracts(target, t, d, e, i, seed):
    rng = np.random.default_rng(seed)
    dev = Dev(target)
    tab = dev.buf(tables())
    k = min(3, e)
    x = to_bf16(rng.standard_normal((t, d)) * np.exp2(rng.uniform(-6, 6, (t, d // 32))).repeat(32, axis=1))
    gw = to_bf16(rng.standard_normal((e, d)) / np.sqrt(d))
    gb = (rng.standard_normal(e) * 0.1).astype(F32)
    r = dict(w13=rng.integers(0, 256, (e, 2, i, d // 2), dtype=U8), s13=rng.integers(116, 124, (e, 2, i, d // 32), dtype=U8),
             w2=rng.integers(0, 256, (e, d, i // 2), dtype=U8), s2=rng.integers(116, 124, (e, d, i // 32), dtype=U8))
    c13, c2 = rng.integers(0, 254, (2, i, d), dtype=U8), rng.integers(0, 254, (d, i), dtype=U8)
    sh = dict(w13=(c13 + (c13 >= 0x7F)).astype(U8), s13=rng.integers(108, 116, (2, i // 32, d // 32), dtype=U8),
              w2=(c2 + (c2 >= 0x7F)).astype(U8), s2=rng.integers(108, 116, (d // 32, i // 32), dtype=U8))
    ex = [ExpertWeights(QWeight("mxfp4", r["w13"][j, 0], r["s13"][j, 0]), QWeight("mxfp4", r["w13"][j, 1], r["s13"][j, 1]),
                        QWeight("mxfp4", r["w2"][j], r["s2"][j])) for j in range(e)]
    shw = ExpertWeights(QWeight("fp8", sh["w13"][0], sh["s13"][0]), QWeight("fp8", sh["w13"][1], sh["s13"][1]),
                        QWeight("fp8", sh["w2"], sh["s2"]))

    # act_qdq and gate
    xq = act_qdq(x)
    xc, xs, codes, scales = qdq(dev, tab, x)
    assert np.array_equal(codes, xq.codes) and np.array_equal(scales, xq.scales)
    ids_b, rw_b = dev.buf(nbytes=t * k * 4), dev.buf(nbytes=t * k * 4)
    dev.run("moe_gate", [dev.buf(x.view(np.uint16)), dev.buf(gw.view(np.uint16)), dev.buf(gb), ids_b, rw_b, u32(t),
                         u32(d), u32(e), u32(k), ctypes.c_float(1.5)], t)
    ids, rw = moe_gate(x, gw, gb, k)
    assert np.array_equal(dev.get(ids_b, (t, k), np.int32), ids)
    assert np.array_equal(bits(dev.get(rw_b, (t, k), F32)), bits(rw))

    # routed experts: packed and expanded give the contract's bits
    want_h = np.zeros((t * k, i), F32)
    for sl in range(t * k):
        row, ew = sl // k, ex[int(ids.reshape(-1)[sl])]
        sub = QAct(xq.codes[row:row + 1], xq.scales[row:row + 1])
        want_h[sl] = swiglu(linear(sub, ew.w1), linear(sub, ew.w3), rw.reshape(-1)[sl:sl + 1])[0]
    want_slots = routed_slots(xq, ids, rw, ex)
    ex13 = np.stack([np.stack([expand(QWeight("mxfp4", r["w13"][j, m], r["s13"][j, m])) for m in range(2)]) for j in range(e)])
    ex2 = np.stack([expand(QWeight("mxfp4", r["w2"][j], r["s2"][j])) for j in range(e)])
    for fmt, w13, s13, w2, s2 in (("mxfp4", r["w13"], r["s13"], r["w2"], r["s2"]),
                                  ("bf16", ex13.view(np.uint16), None, ex2.view(np.uint16), None)):
        h = lin(dev, tab, fmt, xc, xs, ids_b, rw_b, t, k, 0, dev.buf(w13), dev.buf(s13) if s13 is not None else None,
                e, 2, i, d, 1)
        assert np.array_equal(dev.get(h, (t * k, i), np.uint16), to_bf16(want_h).view(np.uint16)), fmt
        hc, hs, _, _ = qdq(dev, tab, dev.get(h, (t * k, i), np.uint16).view(to_bf16(0).dtype))
        slots = lin(dev, tab, fmt, hc, hs, ids_b, None, t, k, 1, dev.buf(w2), dev.buf(s2) if s2 is not None else None,
                    e, 1, d, i, 0)
        assert np.array_equal(bits(dev.get(slots, (t, k, d), F32)), bits(want_slots)), fmt

    # shared expert (FP8) and the combine
    hsh = lin(dev, tab, "fp8", xc, xs, None, None, t, 1, 0, dev.buf(sh["w13"]), dev.buf(sh["s13"]), 1, 2, i, d, 1)
    hc, hs, _, _ = qdq(dev, tab, dev.get(hsh, (t, i), np.uint16).view(to_bf16(0).dtype))
    ysh = lin(dev, tab, "fp8", hc, hs, None, None, t, 1, 1, dev.buf(sh["w2"]), dev.buf(sh["s2"]), 1, 1, d, i, 0)
    want_sh = expert(xq, shw.w1, shw.w3, shw.w2, None, "float32")
    assert np.array_equal(bits(dev.get(ysh, (t, d), F32)), bits(want_sh))
    out = dev.buf(nbytes=t * d * 4)
    dev.run("moe_combine", [dev.buf(want_slots), ysh, ids_b, out, u32(t), u32(k), u32(d), u32(1)], t * d)
    assert np.array_equal(bits(dev.get(out, (t, d), F32)), bits(combine_slots(want_slots, ids, want_sh)))


@SETTINGS
@given(st.integers(1, 6), st.sampled_from([32, 64, 96]), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_moe_combine_official_matches_contract(target, t, d, k, seed):
    """The exact-official epilogue kernel on all-reduced partials, including values on bf16 ties."""
    rng = np.random.default_rng(seed)
    dev = Dev(target)
    ids = np.stack([rng.permutation(8)[:k] for _ in range(t)]).astype(np.int32)
    slots = (rng.standard_normal((t, k, d)) * np.exp2(rng.integers(-20, 20, (t, k, d)))).astype(F32)
    ties = rng.random((t, k, d)) < 0.3  # exactly halfway between two bf16 values
    slots[ties] = (to_bf16(slots[ties]).astype(F32).view(np.uint32) | 0x8000).view(F32)
    shared = (rng.standard_normal((t, d)) * 4).astype(F32)
    out = dev.buf(nbytes=t * d * 2)
    dev.run("moe_combine_official", [dev.buf(slots), dev.buf(shared), dev.buf(ids), out, u32(t), u32(k), u32(d)], t * d)
    want = official_epilogue(slots, shared, ids)
    assert np.array_equal(dev.get(out, (t, d), np.uint16), want.view(np.uint16))


def test_e4m3_encoding_ties_and_edges(target):
    """RNE ties to the even code, subnormals, +-0, the clamp at 448: against ml_dtypes."""
    dev = Dev(target)
    tab = dev.buf(tables())
    vals = np.array([0.0, -0.0, 2**-10, 3 * 2**-10, 2**-9, 1.0625, 1.1875, 448.0, 440.0, 432.0, 1e-30, -5.5, 15.5, 17.0],
                    F32)
    x = to_bf16(np.concatenate([vals, np.zeros(32 - vals.size, F32)])[None, :] * np.float32(1.0))
    x[0, -1] = to_bf16(np.float32(448.0))  # keeps the scale at 2^0
    _, _, codes, _ = qdq(dev, tab, x)
    assert np.array_equal(codes, act_qdq(x).codes)


def test_gpu_check_tool_compares_every_output_with_the_cpu_driver(target, tmp_path):
    """tools/level_zero_moe_check.py (what a user with an Intel GPU runs) on the SYCL path here: exit 0
    with every epoch of the six tiny-moe corpora (both combine modes) exact; a MoE command left out is
    caught (exit 1), named, and counted on every rank of every corpus that has it."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    tool = Path(__file__).resolve().parents[1] / "tools" / "level_zero_moe_check.py"
    out = tmp_path / "r.json"
    ok = subprocess.run([sys.executable, str(tool), "--device", "cpu", "--epochs", "1", "--changed", "1",
                         "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "EXACT: 6 MoE corpora" in ok.stdout
    res = json.loads(out.read_text())["results"]
    assert len(res) == 6 and all([e["kind"] for e in r["epochs"]] == ["graph", "eager", "changed"]
                                 and all(e["elements"] > 0 for e in r["epochs"]) for r in res.values())
    bad = subprocess.run([sys.executable, str(tool), "--device", "cpu", "--epochs", "1", "--changed", "0",
                          "--delete", "moe_combine", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "MISMATCH" in bad.stdout and "moe_combine.out" in bad.stdout
    res = json.loads(out.read_text())["results"]
    fused = {n: r for n, r in res.items() if n.endswith("fused")}
    assert len(fused) == 2 and all(all(r["per_rank"]) and r["by_op"]["moe_combine"] > 0 for r in fused.values())
    assert not any(any(r["per_rank"]) for n, r in res.items() if n not in fused)  # no moe_combine to leave out


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([1, 2]), st.integers(1, 8), st.sampled_from(["dspark", "mtp1"]),
       st.sampled_from(["packed", "expanded"]), st.sampled_from(["official", "fused"]))
def test_every_pointer_argument_lies_in_its_allocation(tp, rows, kind, weights, combine):
    """plan.arena / plan.locate, the binding rule of both level-zero paths: every pointer argument of
    every launch lies inside its allocation; arena regions are aligned, disjoint and hold their bytes;
    a view is exactly its rank's slice; a rank's MoE launches touch only that rank's slices."""
    from decoder_shell.commands.program import build_cycle
    from decoder_shell.contracts.allreduce import RingContract
    from decoder_shell.drivers.level_zero import plan as planning
    from decoder_shell.geometry import preset

    cyc = build_cycle(preset("tiny-moe", tp=tp, verify_rows=2, draft_rows=rows, draft_kind=kind, moe_weights=weights,
                             moe_combine=combine), RingContract())
    plan = planning.build_plan(cyc, planning.group_size(256))
    layout = planning.arena(plan)
    spans = sorted(layout.regions.values())
    assert spans and all(o % planning.ARENA_ALIGN == 0 for o, _ in spans)
    assert all(a[0] + a[1] <= b[0] for a, b in zip(spans, spans[1:])) and spans[-1][0] + spans[-1][1] <= layout.nbytes
    size = {planning.ARENA: layout.nbytes, **{b.id: max(b.nbytes, 1) * cyc.ranks for b in cyc.buffers}}
    moe = 0
    for launch in plan:
        for a in launch.args:
            where = planning.locate(cyc, layout, a)
            if where is None:
                assert a.kind in planning.SCALARS
                continue
            space, offset, n = where
            assert 0 <= offset and offset + n <= size[space], (launch.kernel, a)
            if a.kind == "view":
                bid, rank = a.value
                assert rank == launch.rank and (offset, n) == (rank * cyc.buffers[bid].nbytes, cyc.buffers[bid].nbytes)
            if a.kind == "scratch":
                moe += 1
                assert a.value[1] == launch.rank and n == a.value[3]
    assert moe > 0
