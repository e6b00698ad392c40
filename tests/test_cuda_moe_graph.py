"""The cuda driver's cycle graph for a MoE draft, proven on the CPU.

A real CudaSession is built against a driver API that keeps device memory as host byte arrays (no
GPU here; the kernels' NVRTC build is tests/test_cuda_moe_build.py's job). Its launch list (the graph's
nodes, in order) is then interpreted: each MoE kernel launch reads exactly the bytes its argument struct
points at (addresses, strides, rows, top-k, formats, grid) and runs the numpy contract of that kernel
on them; the other commands' launches run their command's contract on what the memory holds. The
outputs of every command on every rank must be the cpu driver's reference bit-for-bit, with every
output written (outputs start poisoned). A wrong address, stride, shape or format in a MoE launch
gives wrong bits or a read outside its buffer, and fails.
"""

from __future__ import annotations

import ctypes as C
import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from decoder_shell.commands.program import build_cycle, reference, run_command
from decoder_shell.contracts.act_qdq import QAct, act_qdq
from decoder_shell.contracts.expert import swiglu
from decoder_shell.contracts.moe import combine_slots, official_epilogue
from decoder_shell.contracts.moe_gate import gate_linear, gate_route, moe_gate
from decoder_shell.contracts.numerics import BF16, F32, to_bf16
from decoder_shell.contracts.qlinear import QWeight, expand, linear
from decoder_shell.contracts.allreduce import RingContract, allreduce
from decoder_shell.corpus.synth import injected_values
from decoder_shell.drivers.cuda import kernels as K
from decoder_shell.drivers.cuda import moe as M
from decoder_shell.drivers.cuda.session import CudaSession
from decoder_shell.errors import UsageError
from decoder_shell.geometry import DENSE_OPS, MOE_OPS, preset
from decoder_shell.replay.compare import mismatches

SPAN = 1 << 40  # fake allocations: one per 2^40 bytes of address space


class HostMemoryDriver:
    """The driver API calls a session makes, with device memory kept as host byte arrays; functions are
    their entry names; graph calls are recorded and do nothing."""

    def __init__(self):
        self.mem: dict[int, np.ndarray] = {}
        self.handles = itertools.count(1)
        self.bindings = SimpleNamespace(
            CUDA_KERNEL_NODE_PARAMS=SimpleNamespace, CUgraphEdgeData=SimpleNamespace,
            CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC=1,
            CUgraphDependencyType=SimpleNamespace(CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC=1))

    def at(self, addr: int, nbytes: int) -> np.ndarray:
        base = addr // SPAN * SPAN
        buf, off = self.mem[base], addr - base
        assert 0 <= off and off + nbytes <= buf.size, f"access of {nbytes} bytes at +{off} outside its allocation"
        return buf[off:off + nbytes]

    def cuMemAlloc(self, n):
        base = (len(self.mem) + 1) * SPAN
        self.mem[base] = np.zeros(int(n), np.uint8)
        return base

    def cuMemFree(self, p):
        del self.mem[int(p)]

    def cuMemsetD8(self, p, v, n, *stream):
        self.at(int(p), int(n))[:] = v

    cuMemsetD8Async = cuMemsetD8

    def cuMemcpyHtoD(self, p, host, n):
        C.memmove(self.at(int(p), int(n)).ctypes.data, host, int(n))

    def cuMemcpyDtoH(self, host, p, n):
        C.memmove(host, self.at(int(p), int(n)).ctypes.data, int(n))

    def cuModuleGetFunction(self, mod, name):
        return name.decode()

    def stream_done(self, stream):  # api.Checked's query: nothing runs asynchronously here
        return True

    def __getattr__(self, name):  # streams, events, modules, graph nodes: handles, nothing to do
        if name.startswith("cu"):
            return lambda *a: next(self.handles)
        raise AttributeError(name)


def load(cu, addr, dtype, shape):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return cu.at(addr, n).view(dtype).reshape(shape).copy()


def store(cu, addr, value):
    v = np.ascontiguousarray(value)
    cu.at(addr, v.nbytes)[:] = v.view(np.uint8).reshape(-1)


def weight(cu, fmt, a, e, m, n, k):
    """Matrix m of expert e of a linear launch, read as the kernel indexes it (MoeLin strides)."""
    w = a.w + e * a.w_estride + m * a.w_mstride
    rows = [load(cu, w + j * a.w_rstride, np.uint8, ({"mxfp4": k // 2, "fp8": k, "bf16": 2 * k}[fmt],))
            for j in range(n)]
    codes = np.stack(rows)
    if fmt == "bf16":
        return codes.view(BF16)
    s = a.s + e * a.s_estride + m * a.s_mstride
    return QWeight(fmt, codes, load(cu, s, np.uint8, (n, k // 32) if fmt == "mxfp4" else (n // 32, k // 32)))


def run_linear(cu, name, ln):
    """moe_up_* / moe_down_* (warp or spread kernels) as moe.cu / moe_routed.cu compute them: every slot
    of each expert; 8 output rows per block (spread: its own rows per block, and the block size and
    shared memory its K asks for)."""
    grid, a = ln.grid, ln.args[0]
    parts = name.split("_")
    stage, fmt, spread = parts[1], parts[-1], parts[2:-1] == ["spread"]
    assert len(parts) == (4 if spread else 3), name
    mats = 2 if stage == "up" else 1
    rows_per_block = M.spread_rows(mats) if spread else M.WARPS
    assert grid[1:] == (a.N // rows_per_block, 1) and a.N % rows_per_block == 0 and a.K % 32 == 0
    if spread:
        assert M.spread_fits(a.N, a.K, mats) and ln.block == (M.spread_threads(a.K, mats), 1, 1)
        assert ln.shared == M.spread_shared_bytes(a.K, mats) <= 48 * 1024
    else:
        assert ln.block == (M.WARPS * 32, 1, 1)
    slots = a.rows * a.topk if a.ids else a.rows
    ids = load(cu, a.ids, np.int32, (slots,)) if a.ids else np.zeros(slots, np.int32)
    arows = np.arange(slots) if a.act_per_slot else (np.arange(slots) // a.topk if a.ids else np.arange(slots))
    nact = slots if a.act_per_slot else a.rows
    xq = QAct(load(cu, a.xc, np.uint8, (nact, a.K)), load(cu, a.xs, np.uint8, (nact, a.K // 32)))
    rw = load(cu, a.rw, F32, (slots,)) if a.rw else None
    assert grid[0] == (min(a.experts, slots) if a.ids else a.experts)  # routed: a column per distinct id
    for e in range(a.experts):
        sl = np.nonzero(ids == e)[0]
        if not sl.size:
            continue
        sub = QAct(xq.codes[arows[sl]], xq.scales[arows[sl]])
        if stage == "up":
            g = linear(sub, weight(cu, fmt, a, e, 0, a.N, a.K), "bfloat16")
            u = linear(sub, weight(cu, fmt, a, e, 1, a.N, a.K), "bfloat16")
            out = to_bf16(swiglu(g, u, None if rw is None else rw[sl]))
        else:
            out = linear(sub, weight(cu, fmt, a, e, 0, a.N, a.K), "float32")
        row = out.dtype.itemsize * a.N
        for j, s in enumerate(sl):
            store(cu, a.out + int(s) * row, out[j])


def run_dense(cu, name, grid, a):
    """dense_{fp8,bf16}_{bf16,f32} as moe.cu computes them: group g (block column) reads inputs
    [g*K, (g+1)*K) of each row and weight g, writes out[t, g*N + n]."""
    _, fmt, out = name.split("_")
    groups = a.experts
    assert grid == (groups, a.N // M.WARPS, 1) and not a.ids and a.K % 32 == 0
    xc = load(cu, a.xc, np.uint8, (a.rows, groups * a.K))
    xs = load(cu, a.xs, np.uint8, (a.rows, groups * a.K // 32))
    kg = a.K // 32
    y = np.concatenate([linear(QAct(xc[:, g * a.K:(g + 1) * a.K], xs[:, g * kg:(g + 1) * kg]),
                               weight(cu, fmt, a, g, 0, a.N, a.K), {"bf16": "bfloat16", "f32": "float32"}[out])
                        for g in range(groups)], axis=1)
    store(cu, a.out, y)


#: How the interpreter models moe_gate_split_g<G>: each block's sums (the contract's lane order) and the
#: row stride of its scores scratch (E); tests change them to show a wrong kernel would fail.
SPLIT_MODEL = {"linear": gate_linear, "stride": lambda e: e}


def run_gate_split(cu, ln, v):
    """moe_gate_split_g<G> as moe.cu runs it (G from the kernel's name), its blocks in a shuffled order:
    block (t, g) writes the linear sums of experts [g*G, (g+1)*G) of row t into scores[t, :] and arrives
    on count[t]
    (64-bit, never reset); the block that brings it to a multiple of the grid's columns routes row t
    from what scores[t, :] then holds."""
    x, w, bias, scores, count, ids, wts, rows, d, e, k, scale = v
    linear, stride = SPLIT_MODEL["linear"], SPLIT_MODEL["stride"](e)
    group = int(ln.func.rsplit("_g", 1)[1])
    assert ln.grid[0] == rows and ln.grid[2] == 1 and ln.block == (1024, 1, 1)
    groups = ln.grid[1]
    xs, ws, b = load(cu, x, BF16, (rows, d)), load(cu, w, BF16, (e, d)), load(cu, bias, F32, (e,))
    order = np.random.default_rng(rows * 131 + e).permutation(rows * groups)
    for t, g in zip(*(a.tolist() for a in np.divmod(order, groups))):
        lo, hi = g * group, min(e, (g + 1) * group)
        if lo < hi:
            store(cu, scores + 4 * (t * stride + lo), linear(xs[t:t + 1], ws[lo:hi])[0])
        n = load(cu, count + 8 * t, np.uint64, (1,)) + np.uint64(1)
        store(cu, count + 8 * t, n)
        if n[0] % groups == 0:
            i, rw = gate_route(load(cu, scores + 4 * t * stride, F32, (1, e)), b, k, np.float32(scale))
            store(cu, ids + 4 * k * t, i.astype(np.int32)), store(cu, wts + 4 * k * t, rw)


def run_moe_launch(cu, name, ln):
    if name.startswith("dense_"):
        return run_dense(cu, name, ln.grid, ln.args[0])
    v = None if name.startswith(("moe_up", "moe_down")) else [x.value for x in ln.args]
    if name == "moe_qdq":
        x, codes, scales, rows, k = v
        assert ln.grid == (-(-(k // 32) // 8), rows, 1)
        q = act_qdq(load(cu, x, BF16, (rows, k)))
        store(cu, codes, q.codes), store(cu, scales, q.scales)
    elif name == "moe_gate":
        x, w, bias, ids, wts, rows, d, e, k, scale = v
        assert ln.grid == (rows, 1, 1)
        i, rw = moe_gate(load(cu, x, BF16, (rows, d)), load(cu, w, BF16, (e, d)), load(cu, bias, F32, (e,)), k,
                         np.float32(scale))
        store(cu, ids, i.astype(np.int32)), store(cu, wts, rw)
    elif name.startswith("moe_gate_split_g"):
        run_gate_split(cu, ln, v)
    elif name == "moe_expand":
        codes, scales, out, rows, k, fmt, srows, _ = v
        fmt = {0: "mxfp4", 1: "fp8"}[fmt]
        assert srows == (1 if fmt == "mxfp4" else 32)
        w = QWeight(fmt, load(cu, codes, np.uint8, (rows, k // 2 if fmt == "mxfp4" else k)),
                    load(cu, scales, np.uint8, (rows // srows, k // 32)))
        store(cu, out, expand(w))
    elif name == "moe_combine":
        slots, shared, ids, out, rows, k, d = v
        assert ln.grid == (-(-d // 256), rows, 1)
        i = load(cu, ids, np.int32, (rows, k))
        store(cu, out, combine_slots(load(cu, slots, F32, (rows, k, d)), i, load(cu, shared, F32, (rows, d))))
    elif name == "moe_round_bf16":
        x, out, n = v
        assert ln.grid == (max(1, -(-n // 256)), 1, 1)
        store(cu, out, to_bf16(load(cu, x, F32, (n,))))
    elif name == "moe_combine_official":
        slots, shared, ids, out, rows, k, d = v
        assert ln.grid == (-(-d // 256), rows, 1)
        i = load(cu, ids, np.int32, (rows, k))
        store(cu, out, official_epilogue(load(cu, slots, F32, (rows, k, d)), load(cu, shared, F32, (rows, d)), i))
    else:
        run_linear(cu, name, ln)


def interpret(sess, cu):
    """Run the session's launches in graph order; returns how many launches were MoE kernels."""
    cyc, g = sess.cycle, sess.graph
    done, moe_launches = set(), 0
    for ln, idx in zip(g.eager, g.commands):
        cmd = cyc.commands[idx]
        if isinstance(ln.func, str) and ln.func.startswith(("moe_", "dense_")):
            assert cmd.op in MOE_OPS or cmd.op in DENSE_OPS
            run_moe_launch(cu, ln.func, ln)
            moe_launches += 1
            continue
        if cmd.op == "moe_combine_official" and ln.func == "allreduce_kernel":  # the fused candidate's sum
            a = ln.args[0]
            n = a.ring.n
            assert (a.lo, a.hi, a.mode, a.ring.is_bf16) == (0, n, 0, 0)
            parts = [load(cu, a.inp[q], F32, (n,)) for q in range(cyc.ranks)]
            store(cu, a.out[a.rank], allreduce(parts, cyc.contract))
            continue
        assert cmd.op not in MOE_OPS and cmd.op not in DENSE_OPS, f"{cmd.boundary.name} launches {ln.func}"
        if idx in done:
            continue
        done.add(idx)
        values = [{b: sess.read(r, b) for b in cmd.inputs.values()} for r in range(cyc.ranks)]
        for r, outs in enumerate(run_command(cyc, cmd, values)):
            for name, bid in cmd.outputs.items():
                sess.write(r, bid, outs[name])
    return moe_launches


@pytest.fixture
def no_builds(monkeypatch):
    monkeypatch.setattr(K, "compile_cubin", lambda *a, **k: b"\x7fELF")
    monkeypatch.setattr(M, "build", lambda arch: b"\x7fELF")


def replay_on_host(geometry, seed, variants=None, replays=1):
    cyc = build_cycle(geometry, RingContract())
    cu = HostMemoryDriver()
    sess = CudaSession(SimpleNamespace(cu=cu, arch="sm_90", sm=90), cyc, variants)
    values = injected_values(cyc, seed)
    for r in range(cyc.ranks):
        for bid, v in values[r].items():
            sess.write(r, bid, v)
    decoded = 0
    if sess.stale:  # what run() does first after a write of packed weights (moe-expanded)
        for ln in sess.decodes:
            run_moe_launch(cu, ln.func, ln)
        decoded = len(sess.decodes)
    for _ in range(replays):  # the graph replayed: the outputs poisoned before each, the scratch not reset
        sess.poison()
        n = interpret(sess, cu)
    want = reference(cyc, values)
    bad = {b.name: mismatches(sess.read(r, b.id), want[r][b.id]) for r in range(cyc.ranks) for b in cyc.outputs()}
    formats = {ln.func for ln in sess.graph.eager if isinstance(ln.func, str)}
    sess.close()
    assert not cu.mem, "the session left device memory allocated"
    return cyc, n + decoded, {k: v for k, v in bad.items() if v}, formats


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(weights=st.sampled_from(["packed", "expanded"]), tp=st.sampled_from([1, 2, 4]),
       rows=st.sampled_from([1, 5, 10]), kind=st.sampled_from(["mtp1", "dspark"]),
       combine=st.sampled_from(["official", "fused"]), seed=st.integers(0, 2 ** 16))
@example(weights="packed", tp=2, rows=5, kind="dspark", combine="official", seed=1)
@example(weights="expanded", tp=4, rows=1, kind="mtp1", combine="official", seed=2)
def test_moe_graph_launches_compute_the_reference(no_builds, weights, tp, rows, kind, combine, seed):
    if tp == 4 and rows == 10:
        rows = 5  # keep the example small
    g = preset("tiny-moe", tp=tp, verify_rows=2, draft_rows=rows, draft_kind=kind, moe_weights=weights,
               moe_combine=combine)
    cyc, n, bad, funcs = replay_on_host(g, seed)
    subs = sum(c.op == "moe_routed" for c in cyc.commands)
    # qdq, gate, combine (fused or official) + 3 per expert command, per rank and sub-block
    assert n == tp * subs * (3 + 3 + 3)
    assert sum(c.op == ("moe_combine_official" if combine == "official" else "moe_combine") for c in cyc.commands) == subs
    assert bad == {}
    fmts = {"mxfp4", "fp8"} if weights == "packed" else {"bf16"}
    assert {f.rsplit("_", 1)[1] for f in funcs if f.startswith("moe_up")} == fmts


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tp=st.sampled_from([1, 2]), rows=st.sampled_from([1, 5]), seed=st.integers(0, 2 ** 16))
def test_moe_expanded_candidate_decodes_on_the_device_and_computes_the_reference(no_builds, tp, rows, seed):
    g = preset("tiny-moe", tp=tp, verify_rows=2, draft_rows=rows, draft_kind="dspark")
    cyc = build_cycle(g, RingContract())
    experts = [c.index for c in cyc.commands if c.op in ("moe_routed", "moe_shared")]
    cyc, n, bad, funcs = replay_on_host(g, seed, {i: "moe-expanded" for i in experts})
    assert bad == {}
    assert n == tp * len(experts) * (3 + 2) + tp * len(experts) // 2 * 3  # + 2 decodes per expert command
    lin = {f for f in funcs if f.startswith(("moe_up", "moe_down"))}  # warp or spread kernels: bf16 only
    assert {f.rsplit("_", 1)[1] for f in lin} == {"bf16"} and {f.split("_")[1] for f in lin} == {"up", "down"}


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(weights=st.sampled_from(["packed", "expanded"]), tp=st.sampled_from([1, 2]), rows=st.sampled_from([1, 5, 10]),
       seed=st.integers(0, 2 ** 16))
def test_moe_spread_candidate_computes_the_reference(no_builds, weights, tp, rows, seed):
    g = preset("tiny-moe", tp=tp, verify_rows=2, draft_rows=rows, draft_kind="dspark", moe_weights=weights)
    cyc = build_cycle(g, RingContract())
    experts = [c.index for c in cyc.commands if c.op in ("moe_routed", "moe_shared")]
    cyc, n, bad, funcs = replay_on_host(g, seed, {i: "moe-spread" for i in experts})
    assert bad == {}
    assert n == tp * len(experts) // 2 * 9
    fmts = ("mxfp4", "fp8") if weights == "packed" else ("bf16",)
    assert {f for f in funcs if f.startswith(("moe_up", "moe_down"))} == \
        {f"moe_{s}_spread_{f}" for s in ("up", "down") for f in fmts}


def test_spread_launch_geometry():
    """The warp kernels' block columns; rows per block and a block that is the fewest whole warps keeping
    the fewest rounds of the ROWS x K/32 (row, group) tasks; a linear that does not fit (rows off the
    block, a slot over the shared memory) takes the warp kernel."""
    for mats in (1, 2):
        for k in range(32, 16384, 32):
            threads, tasks = M.spread_threads(k, mats), M.spread_rows(mats) * k // 32
            rounds = -(-tasks // threads)
            assert threads % 32 == 0 and 32 <= threads <= 256 and rounds == -(-tasks // 256)
            assert threads == 32 or -(-tasks // (threads - 32)) > rounds
    kw = dict(xc=1, xs=2, ids=3, rw=4, rows=5, topk=3, act_per_slot=False, w=5, s=6, experts=128, out=7)
    funcs = {n: n for n in M.KERNELS}
    for stage, mats, n, k, name, grid in (
            ("up", 2, 1152, 5120, "moe_up_spread_mxfp4", (15, 72, 1)),
            ("up", 2, 1152, 5504, "moe_up_spread_mxfp4", (15, 72, 1)),
            ("up", 2, 1152, 5536, "moe_up_mxfp4", (15, 144, 1)),
            ("up", 2, 1160, 5120, "moe_up_mxfp4", (15, 145, 1)),
            ("down", 1, 5120, 1152, "moe_down_spread_mxfp4", (15, 160, 1)),
            ("down", 1, 5120 + 8, 1152, "moe_down_mxfp4", (15, 641, 1))):
        spread = M.linear_launch(funcs, 0, stage, "mxfp4", n=n, k=k, mats=mats, kernel="spread", **kw)
        warp = M.linear_launch(funcs, 0, stage, "mxfp4", n=n, k=k, mats=mats, kernel="warp", **kw)
        assert (spread.func, spread.grid) == (name, grid) and warp.func == f"moe_{stage}_mxfp4"
        assert warp.grid == (15, n // M.WARPS, 1)
    with pytest.raises(ValueError, match="expert linear kernel"):
        M.linear_launch(funcs, 0, "up", "mxfp4", n=1152, k=5120, mats=2, kernel="fast", **kw)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tp=st.sampled_from([1, 2]), rows=st.sampled_from([1, 5, 10]), replays=st.sampled_from([1, 3]),
       seed=st.integers(0, 2 ** 16))
@example(tp=2, rows=5, replays=3, seed=1)
def test_moe_gate_split_candidate_computes_the_reference(no_builds, tp, rows, replays, seed):
    """`moe-gate-split` on every gate: a (rows, E / GATE_GROUP) grid whose last block per row routes it,
    its arrival counts never reset, gives the reference bit for bit on every replay."""
    g = preset("tiny-moe", tp=tp, verify_rows=2, draft_rows=rows, draft_kind="dspark")
    cyc = build_cycle(g, RingContract())
    gates = [c.index for c in cyc.commands if c.op == "moe_gate"]
    cyc, n, bad, funcs = replay_on_host(g, seed, {i: "moe-gate-split" for i in gates}, replays)
    assert bad == {}
    assert n == tp * len(gates) * 9
    assert f"moe_gate_split_g{M.GATE_GROUP}" in funcs and "moe_gate" not in funcs


def test_gate_launch_geometry():
    """Both gate kernels' grids from the shape alone; the split one refuses to run without its scratch."""
    funcs = {n: n for n in M.KERNELS}
    for e, groups in ((1, (1, 1, 1)), (4, (2, 1, 1)), (5, (3, 2, 1)), (8, (4, 2, 1)), (128, (64, 32, 16)),
                      (1024, (512, 256, 128))):
        row = M.gate_launch(funcs, 1, 2, 3, 4, 5, 7, 5120, e, 1, kernel="row")
        assert (row.func, row.grid, row.block) == ("moe_gate", (7, 1, 1), (1024, 1, 1))
        for group, n in zip((2, 4, 8), groups):
            split = M.gate_launch(funcs, 1, 2, 3, 4, 5, 7, 5120, e, 1, kernel="split", scores=6, count=8, group=group)
            assert (split.func, split.grid, split.block) == (f"moe_gate_split_g{group}", (7, n, 1), (1024, 1, 1))
        assert M.gate_launch(funcs, 1, 2, 3, 4, 5, 7, 5120, e, 1, kernel="split", scores=6, count=8).grid == \
            (7, groups[M.GATE_GROUPS.index(M.GATE_GROUP)], 1)
        assert M.gate_scratch_bytes(7, e) == {"scores": 4 * 7 * e, "count": 8 * 7}
    with pytest.raises(ValueError, match="scratch"):
        M.gate_launch(funcs, 1, 2, 3, 4, 5, 7, 5120, 128, 3, kernel="split")
    with pytest.raises(ValueError, match="gate kernel"):
        M.gate_launch(funcs, 1, 2, 3, 4, 5, 7, 5120, 128, 3, kernel="fast")
    with pytest.raises(ValueError, match="split gate groups"):
        M.gate_launch(funcs, 1, 2, 3, 4, 5, 7, 5120, 128, 3, kernel="split", scores=6, count=8, group=16)


def sequential_linear(x, w):
    """The gate's linear summed left to right over d (not the 1024-lane order): a wrong order."""
    p = np.asarray(x, F32)[:, None, :] * np.asarray(w, F32)[None, :, :]
    return np.cumsum(p, axis=-1, dtype=F32)[..., -1]


@pytest.mark.parametrize("fault", ["grid", "order", "stride"])
def test_interpreter_catches_a_wrong_split_gate(no_builds, monkeypatch, fault):
    """The check has teeth: a split gate launched with one column too few (experts never summed, rows
    routed on stale sums), or a kernel that summed in another order or kept its rows' sums at another
    stride than E (the interpreter's model of moe.cu changed so), gives other bits."""
    if fault == "grid":
        real = M.gate_groups
        monkeypatch.setattr(M, "gate_groups", lambda e, group: real(e, group) - 1)
    elif fault == "order":
        monkeypatch.setitem(SPLIT_MODEL, "linear", sequential_linear)
    else:
        monkeypatch.setitem(SPLIT_MODEL, "stride", lambda e: M.GATE_GROUP)
    g = preset("tiny-moe", tp=2, verify_rows=2, draft_rows=5, draft_kind="dspark")
    cyc = build_cycle(g, RingContract())
    gates = {c.index: "moe-gate-split" for c in cyc.commands if c.op == "moe_gate"}
    _, _, bad, _ = replay_on_host(g, 1, gates)
    assert bad


def test_moe_expanded_is_refused_on_an_expanded_corpus_and_on_other_commands(no_builds):
    for weights, op, msg in (("expanded", "moe_routed", "already holds them expanded"),
                             ("packed", "moe_gate", "applies to moe_routed, moe_shared")):
        cyc = build_cycle(preset("tiny-moe", tp=2, verify_rows=2, draft_rows=5, moe_weights=weights), RingContract())
        idx = next(c.index for c in cyc.commands if c.op == op)
        with pytest.raises(UsageError, match=msg):
            CudaSession(SimpleNamespace(cu=HostMemoryDriver(), arch="sm_90", sm=90), cyc, {idx: "moe-expanded"})


def test_interpreter_catches_a_wrong_stride(no_builds, monkeypatch):
    real = M.strides
    monkeypatch.setattr(M, "strides", lambda fmt, *a: {**real(fmt, *a), "w_estride": real(fmt, *a)["w_mstride"]})
    g = preset("tiny-moe", tp=2, verify_rows=2, draft_rows=5, draft_kind="mtp1")
    _, _, bad, _ = replay_on_host(g, 1)
    assert any(".slots" in k for k in bad)


def test_mhc_variants_are_refused_on_moe_commands(no_builds):
    cyc = build_cycle(preset("tiny-moe", tp=2, verify_rows=2, draft_rows=5), RingContract())
    idx = next(c.index for c in cyc.commands if c.op == "moe_routed")
    with pytest.raises(UsageError, match="mHC implementation"):
        CudaSession(SimpleNamespace(cu=HostMemoryDriver(), arch="sm_90", sm=90), cyc, {idx: "fused-m2"})


def test_cuda_check_moe_exactness_pass_on_the_interpreter(no_builds):
    """tools/cuda_check_moe.py's exactness pass (whole MoE cases and the linears alone on gate-less
    operands, both linear kernels, packed and expanded) with its launches run by this interpreter: the
    tool's buffers, launches and contract expectations agree on every element, and a kernel that skipped
    its output would show (outputs start poisoned)."""
    chk, cu, dev = interpreted_check_tool()
    rng = np.random.default_rng(3)
    counts: dict = {}
    for (t, d, e, i), concentrate in (((5, 64, 8, 64), True), ((3, 128, 4, 64), False)):
        r, sh = chk.rand_weights(rng, e, i, d)
        gw = to_bf16(rng.standard_normal((e, d)) / np.sqrt(d))
        gb = (rng.standard_normal(e) * 0.1).astype(F32)
        ex = chk.expanded_stacks(r, sh)
        dw = chk.upload_weights(dev, r, sh, gw, gb, ex)
        chk.check_case(dev, cu, None, rng, t, d, e, i, counts, (r, sh, gw, gb, dw))
        chk.check_linears(dev, cu, None, rng, t, d, e, i, counts, (r, sh, ex, dw), concentrate)
        chk.check_gate_ties(dev, cu, None, rng, t, d, e, counts)
    assert counts and {n: c for n, c in counts.items() if c[1]} == {}
    for gate in M.GATE_KERNELS:
        for name in (f"gate ids ({gate})", f"gate weights ({gate})"):
            assert counts[name][0] > 0, name
    for gate in chk.GATES:
        assert counts[f"gate ids ({gate}, ties)"][0] > 0 and counts[f"gate weights ({gate}, ties)"][0] > 0, gate
    for kern in chk.KERNELS:
        for name in (f"routed up h (mxfp4, {kern})", f"linear down slots (bf16, {kern}, concentrated ids)",
                     f"shared linear up h (fp8, {kern})", f"shared expert (bf16, {kern})"):
            assert counts[name][0] > 0, name


def interpreted_check_tool():
    """tools/cuda_check_moe.py and a MoeDevice whose launches this interpreter runs."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import cuda_check_moe as chk

    cu = HostMemoryDriver()

    class InterpretedDevice(M.MoeDevice):
        def launch(self, launches, stream):
            for ln in launches:
                run_moe_launch(cu, ln.func, ln)

    return chk, cu, InterpretedDevice(cu, "sm_90")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(t=st.integers(1, 12), d=st.sampled_from([32, 64, 1056, 2048]), e=st.sampled_from([1, 3, 4, 8, 13, 32]),
       seed=st.integers(0, 2 ** 16))
def test_cuda_check_moe_gate_ties_on_the_interpreter(no_builds, t, d, e, seed):
    """The tool's tie gates (equal expert rows, two bias values, an all-zero row) on the row gate and the
    split gate of every group size, each replayed on its counts, agree with contracts.moe_gate; and the ties are real: the
    contract's biased scores hold equal values in every case with two or more experts."""
    from decoder_shell.contracts.moe_gate import gate_scores
    chk, cu, dev = interpreted_check_tool()
    counts: dict = {}
    chk.check_gate_ties(dev, cu, None, np.random.default_rng(seed), t, d, e, counts, reps=3)
    assert {n: c for n, c in counts.items() if c[1]} == {} and len(counts) == 2 * len(chk.GATES) == 8
    x, gw, gb = chk.tie_gate(np.random.default_rng(seed), t, d, e)
    biased = gate_scores(x, gw)[0] + gb
    assert e < 2 or len(np.unique(biased)) < e


def test_cuda_check_moe_catches_a_split_gate_in_another_order(no_builds, monkeypatch):
    """The tool on a split gate that sums left to right (not the 1024-lane order): its split gate
    weights mismatch, the row gate's do not."""
    monkeypatch.setitem(SPLIT_MODEL, "linear", sequential_linear)
    chk, cu, dev = interpreted_check_tool()
    rng = np.random.default_rng(5)
    counts: dict = {}
    t, d, e, i = 5, 2048, 8, 64
    r, sh = chk.rand_weights(rng, e, i, d)
    gw = to_bf16(rng.standard_normal((e, d)) / np.sqrt(d))
    gb = (rng.standard_normal(e) * 0.1).astype(F32)
    chk.check_case(dev, cu, None, rng, t, d, e, i, counts, (r, sh, gw, gb, chk.upload_weights(dev, r, sh, gw, gb)))
    assert counts["gate weights (split)"][1] > 0 and counts["gate weights (row)"][1] == 0


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(weights=st.sampled_from(["packed", "expanded"]), tp=st.sampled_from([1, 2]),
       rows=st.sampled_from([1, 5, 10]), kind=st.sampled_from(["mtp1", "dspark"]), seed=st.integers(0, 2 ** 16))
def test_dense_attention_launches_compute_the_reference(no_builds, weights, tp, rows, kind, seed):
    """tiny-moe-attn: the attention commands as graph nodes (moe_qdq for the quantize commands, the
    grouped dense kernels for the projections, wo_a with its groups) give the cpu reference bit for bit."""
    g = preset("tiny-moe-attn", tp=tp, verify_rows=2, draft_rows=rows, draft_kind=kind, moe_weights=weights)
    cyc, n, bad, funcs = replay_on_host(g, seed)
    stages = sum(c.op == "attn_wo_b" for c in cyc.commands)
    dense = sum(c.op in DENSE_OPS for c in cyc.commands)
    assert dense == 9 * stages + 2
    assert n == tp * (stages * 9 + dense)  # the MoE launches as above, plus one per dense command
    assert bad == {}
    fmt = "fp8" if weights == "packed" else "bf16"
    assert {f for f in funcs if f.startswith("dense_")} == {f"dense_{fmt}_bf16", f"dense_{fmt}_f32"}


def test_interpreter_catches_a_wrong_group_stride(no_builds, monkeypatch):
    """wo_a's groups read the wrong weight group: the interpreter gives other bits."""
    real = M.strides
    monkeypatch.setattr(M, "strides", lambda fmt, e, m, n, k: {**real(fmt, e, m, n, k), "w_estride": 0})
    g = preset("tiny-moe-attn", tp=1, verify_rows=2, draft_rows=2, draft_kind="mtp1")
    _, _, bad, _ = replay_on_host(g, 3)
    assert any(".attn_wo_a." in k for k in bad)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tp=st.sampled_from([1, 2]), rows=st.sampled_from([1, 5]), seed=st.integers(0, 2 ** 16))
def test_moe_expanded_covers_the_dense_projections(no_builds, tp, rows, seed):
    """`moe-expanded` on the projections of a packed tiny-moe-attn cycle: their FP8 weights decoded once
    on the device (one decode each), the bf16 dense kernels on the copies, the reference bit for bit."""
    from decoder_shell.replay.candidates import select
    g = preset("tiny-moe-attn", tp=tp, verify_rows=2, draft_rows=rows, draft_kind="dspark")
    cyc = build_cycle(g, RingContract())
    proj = select(cyc, "projections")
    assert len(proj) == 3 * 5 + 1 and all(cyc.commands[i].op in DENSE_OPS for i in proj)
    cyc, n, bad, funcs = replay_on_host(g, seed, {i: "moe-expanded" for i in proj})
    assert bad == {}
    base = tp * (3 * 9 + sum(c.op in DENSE_OPS for c in cyc.commands))  # as without the candidate
    assert n == base + tp * len(proj)  # + one decode per projection and rank
    assert {f for f in funcs if f.startswith("dense_")} == {"dense_bf16_bf16", "dense_bf16_f32"}
    with pytest.raises(UsageError, match="applies to"):
        qdq = next(c.index for c in cyc.commands if c.op == "attn_qdq")
        CudaSession(SimpleNamespace(cu=HostMemoryDriver(), arch="sm_90", sm=90), cyc, {qdq: "moe-expanded"})


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tp=st.sampled_from([1, 2, 4]), rows=st.sampled_from([1, 5]), kind=st.sampled_from(["mtp1", "dspark"]),
       seed=st.integers(0, 2 ** 16))
@example(tp=2, rows=5, kind="dspark", seed=3)
def test_fused_combine_candidate_computes_the_fused_contract(no_builds, tp, rows, kind, seed):
    """Gate candidate `combine=fused` on an official cycle: moe_combine (per rank, into the shared
    all-reduce's out) -> fp32 all-reduce (into the slot all-reduce's out) -> bf16 rounding, the official
    all-reduces gone; every output the candidate computes equals the cpu driver's `fused` variant (the
    contracts) bit for bit, and the official cycle differs from it."""
    from decoder_shell.commands.program import elided_by
    from decoder_shell.drivers.cpu import CpuSession
    g = preset("tiny-moe", tp=tp, verify_rows=2, draft_rows=rows, draft_kind=kind, moe_combine="official")
    cyc = build_cycle(g, RingContract())
    variants = {c.index: "fused" for c in cyc.commands if c.op == "moe_combine_official"}
    elided = elided_by(cyc, variants)
    assert len(elided) == 2 * len(variants)
    cu = HostMemoryDriver()
    sess = CudaSession(SimpleNamespace(cu=cu, arch="sm_90", sm=90), cyc, variants)
    cpu = CpuSession(cyc, variants)
    values = injected_values(cyc, seed)
    for r in range(cyc.ranks):
        for bid, v in values[r].items():
            sess.write(r, bid, v)
            cpu.write(r, bid, v)
    sess.poison()
    interpret(sess, cu)
    cpu.run()
    funcs = [ln.func for ln in sess.graph.eager]
    assert funcs.count("moe_round_bf16") == tp * len(variants) and "moe_combine_official" not in funcs
    skip = {b for i in elided for b in cyc.commands[i].outputs.values()}
    bad = {b.name: mismatches(sess.read(r, b.id), cpu.read(r, b.id)) for r in range(cyc.ranks)
           for b in cyc.outputs() if b.id not in skip}
    assert {k: v for k, v in bad.items() if v} == {}
    official = reference(cyc, values)
    out = [c.outputs["out"] for c in cyc.commands if c.index in variants]
    assert any(mismatches(cpu.read(r, b), official[r][b]) for r in range(cyc.ranks) for b in out)
    sess.close()
