"""The persistent cycle kernel: its step list and device table, proven on the CPU, and its build.

The device table (drivers/cuda/steps.py) is interpreted here the way persistent.cu walks it: every
address a PStep holds is mapped back to the buffer it names, the contracts run on what those
addresses hold, and an output is written only where the kernel writes it (streams and the folded
all-reduce in the boundary's step, post/comb by the consumer or the finish, y by the finish one step
later). The cycle this produces must equal the contract reference bit-for-bit on every rank, with
every output written (outputs start poisoned). The kernel itself is built by NVRTC for sm_90 (a
build error is a failure) and its struct layout is checked against the ctypes mirrors by the
compiler; running it needs a GPU (tools/persistent_check.py).
"""

from __future__ import annotations

import ctypes as C

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoder_shell.commands import ops
from decoder_shell.commands.program import build_cycle, reference
from decoder_shell.contracts.allreduce import RingContract, allreduce
from decoder_shell.corpus.synth import injected_values
from decoder_shell.drivers.base import poison_like
from decoder_shell.drivers.cuda import args as A
from decoder_shell.drivers.cuda import steps as S
from decoder_shell.geometry import Geometry, preset
from decoder_shell.replay.compare import mismatches

OPS = {v: k for k, v in S.OP_CODE.items()}


def fake_addresses(cycle):
    """Distinct addresses per (rank, buffer) and per (rank, boundary scratch), and the way back."""
    back = {}

    def addr(r, bid):
        a = ((r + 1) << 40) | (bid << 8)
        back[a] = (r, bid)
        return a

    def scratch(r, idx):
        a = ((r + 1) << 40) | (1 << 39) | (idx << 8)
        back[a] = (r, ("scratch", idx))
        return a
    return addr, scratch, back


def contract_of(ring: A.Ring) -> RingContract:
    itemsize = 2 if ring.is_bf16 else 4
    return RingContract(chunks_per_rank=ring.cpr, max_chunk_bytes=ring.per * itemsize if ring.per else 0,
                        offset=ring.offset, direction=ring.dir, accumulation="hop" if ring.hop else "fp32",
                        segments=ring.segments)


def interpret(cycle, table, back, injected, local=None, mem=None):
    """Run the PStep table as persistent.cu does, with the numpy contracts, for the ranks `local`
    (default all: emulated; one rank: its process's kernel) into `mem`; returns every buffer per rank."""
    R, g = cycle.ranks, cycle.geometry
    local = list(range(R)) if local is None else local
    if mem is None:
        mem = [{b.id: poison_like(b.shape, b.dtype) for b in cycle.outputs()} for _ in range(R)]
        for r in range(R):
            mem[r].update(injected[r])
    results = {}  # scratch address -> the boundary's contract outputs (what its partials stand for)

    def at(a, r):
        rr, bid = back[a]
        assert rr == r or r is None, (rr, r)
        return mem[rr], bid

    def load(a, r=None):
        m, bid = at(a, r)
        return m[bid]

    def store(a, value, r=None):
        m, bid = at(a, r)
        b = cycle.buffers[bid]
        assert b.kind == "output", f"step writes {b.name}, which is not an output"
        m[bid] = np.asarray(value, dtype=b.dtype).reshape(b.shape)

    n = len(table)
    for s in range(n + 1):
        pend = table[s - 1] if s > 0 and table[s - 1].kind == 1 else None
        if s < n:
            e = table[s]
            assert -1 <= e.prev < s
            if e.kind == 0:
                ar = e.ar
                assert e.nunits * S.BLOCK >= ar.ring.n
                out = allreduce([load(ar.inp[q], q) for q in range(R)], contract_of(ar.ring))
                for q in local:
                    store(ar.out[q], out, q)
            else:
                op = OPS[e.op]
                assert e.nout == S.NOUT[op] and e.nunits == R * e.rows * S.LANE_GROUPS * e.groups
                assert e.groups * min(S.outputs_per_unit(cycle), e.nout) == e.nout  # the kernel's OPG
                for r in local:
                    a = e.mh[r]
                    assert a.M == e.rows
                    assert a.D == g.hidden
                    if e.fused:
                        x = allreduce([load(a.peers[q], q) for q in range(R)], contract_of(a.ring))
                        store(a.ar_out, x, r)
                    else:
                        x = load(a.x, r)
                    t = {"x": x, "fn": load(a.fn, r), "base": load(a.base, r), "scale": load(a.scale, r)}
                    if op != "mhc_pre":
                        if e.prev >= 0:
                            src = results[table[e.prev].mh[r].scratch]
                            store(a.post_in, src["next_post"], r)
                            store(a.comb_in, src["next_comb"], r)
                        t.update(residual=load(a.residual, r), post=load(a.post_in, r), comb=load(a.comb_in, r))
                    out = ops.run_mhc(op, t, g.mhc, g.hc)
                    results[a.scratch] = out
                    store(a.streams, out["streams"], r)
        if pend is not None:  # finish items of the previous step's boundary
            for r in local:
                a = pend.mh[r]
                out = results[a.scratch]
                store(a.y, out["y"], r)
                if pend.finish_pc:
                    store(a.post_out, out["next_post"], r)
                    store(a.comb_out, out["next_comb"], r)
    return mem


def check(cycle, seed):
    values = injected_values(cycle, seed)
    steps = S.plan(cycle)
    addr, scratch, back = fake_addresses(cycle)
    table = S.encode(cycle, steps, addr, scratch)
    got = interpret(cycle, table, back, values)
    want = reference(cycle, values)
    bad = sum(mismatches(got[r][b.id], want[r][b.id]) for r in range(cycle.ranks) for b in cycle.outputs())
    return steps, bad


def test_dsv4_flash_plan_folds_every_reduction_into_its_boundary():
    cyc = build_cycle(preset("dsv4-flash", tp=4, verify_rows=2, draft_rows=1), RingContract())
    steps = S.plan(cyc)
    mhc = [c for c in cyc.commands if c.op != "allreduce"]
    assert len(steps) == len(mhc)  # one step (one barrier) per boundary, both phases
    assert all(s.kind == "mhc" and s.ar == s.cmd - 1 for s in steps)
    # every post/pre and head boundary takes post and comb from the boundary right before it
    for k, s in enumerate(steps):
        op = cyc.commands[s.cmd].op
        assert s.prev == (-1 if op == "mhc_pre" else k - 1)
        assert not s.finish_pc  # every post/comb has a consumer in the next step


def test_dsv4_flash_table_interprets_to_the_reference():
    cyc = build_cycle(preset("dsv4-flash", tp=2, verify_rows=2, draft_rows=1), RingContract())
    _, bad = check(cyc, 3)
    assert bad == 0


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=st.sampled_from([1, 3, 17, 100, 257, 1024, 2048]), layers=st.integers(1, 2), ranks=st.integers(1, 8),
       rows=st.integers(1, 9), draft=st.integers(0, 3), kind=st.sampled_from(["mtp1", "dspark"]),
       rd=st.sampled_from(["bfloat16", "float32"]), cpr=st.integers(1, 3), off=st.integers(-3, 3),
       seg=st.integers(1, 3), seed=st.integers(0, 2**31 - 1))
def test_table_interprets_to_the_reference_for_any_geometry(d, layers, ranks, rows, draft, kind, rd, cpr, off, seg,
                                                            seed):
    g = Geometry(preset="t", hidden=d, layers=layers, ranks=ranks, verify_rows=rows, draft_rows=draft,
                 draft_kind=kind, reduce_dtype=rd)
    cyc = build_cycle(g, RingContract(chunks_per_rank=cpr, offset=off, segments=seg))
    steps, bad = check(cyc, seed)
    assert bad == 0
    assert sum(1 for s in steps if s.kind == "mhc") == sum(1 for c in cyc.commands if c.op != "allreduce")


def test_one_table_per_rank_process_interprets_to_the_reference_and_carries_its_arrival_slots():
    """--placement processes: each rank's kernel walks its own table (peers' partials through their
    mapped addresses) and meets them at every all-reduce through its slot in every rank's memory."""
    cyc = build_cycle(Geometry(preset="t", hidden=100, layers=2, ranks=3, verify_rows=2, draft_rows=1,
                               reduce_dtype="float32"), RingContract(chunks_per_rank=2, offset=-1, direction=-1))
    values = injected_values(cyc, 4)
    steps = S.plan(cyc)
    addr, scratch, back = fake_addresses(cyc)
    slot = {(q, c.index): ((q + 1) << 40) | (1 << 38) | (c.index << 8)
            for q in range(3) for c in cyc.commands if c.op == "allreduce"}
    mem = None
    for r in range(3):
        table = S.encode(cyc, steps, addr, scratch, lambda i: ([slot[(q, i)] + 8 * r for q in range(3)], slot[(r, i)]))
        for k, st_ in enumerate(steps):
            ar = st_.cmd if st_.kind == "allreduce" else st_.ar
            assert table[k].flag_in == slot[(r, ar)]
            assert [table[k].flag_out[q] for q in range(3)] == [slot[(q, ar)] + 8 * r for q in range(3)]
        if mem is None:
            mem = [{b.id: poison_like(b.shape, b.dtype) for b in cyc.outputs()} for _ in range(3)]
            for q in range(3):
                mem[q].update(values[q])
        interpret(cyc, table, back, values, local=[r], mem=mem)
        want = reference(cyc, values)
        bad = [sum(mismatches(mem[q][b.id], want[q][b.id]) for b in cyc.outputs()) for q in range(3)]
        assert bad[r] == 0 and all(bad[q] > 0 for q in range(r + 1, 3))  # a rank writes only its own outputs
    assert S.max_items(cyc, steps, 1) < S.max_items(cyc, steps)


def test_interpreter_catches_a_broken_link():
    """A table whose boundary takes post/comb from the wrong step must not pass (the check can fail)."""
    cyc = build_cycle(Geometry(preset="t", hidden=64, layers=2, ranks=2, verify_rows=2, draft_rows=0), RingContract())
    steps = S.plan(cyc)
    addr, scratch, back = fake_addresses(cyc)
    table = S.encode(cyc, steps, addr, scratch)
    k = next(i for i, s in enumerate(steps) if s.prev >= 1)
    table[k].prev -= 1
    values = injected_values(cyc, 1)
    got = interpret(cyc, table, back, values)
    want = reference(cyc, values)
    assert sum(mismatches(got[r][b.id], want[r][b.id]) for r in range(2) for b in cyc.outputs()) > 0


def test_unfolded_allreduce_is_its_own_step():
    """An all-reduce that no boundary reads right after it runs as a lone step (kind 0)."""
    cyc = build_cycle(Geometry(preset="t", hidden=64, layers=1, ranks=3, verify_rows=2, draft_rows=0), RingContract())
    i = next(c.index for c in cyc.commands if c.op != "allreduce" and c.index > 1)
    c = cyc.commands[i]
    cyc.commands[i] = type(c)(c.index, c.boundary, {**c.inputs, "x": cyc.commands[i - 1].inputs["x"]}, c.outputs)
    steps = S.plan(cyc)
    assert any(s.kind == "allreduce" and s.cmd == i - 1 for s in steps)


# --- the kernel build ----------------------------------------------------------------------------
def _layout_asserts() -> str:
    """static_asserts of every ctypes offset and size, compiled with the kernels."""
    out = []
    for name, cls in (("PStep", S.PStep), ("PArgs", S.PArgs), ("MhcArgs", A.MhcArgs), ("ArArgs", A.ArArgs)):
        out.append(f"static_assert(sizeof({name}) == {C.sizeof(cls)}, \"{name} size\");")
        for f, _ in cls._fields_:
            cf = {"inp": "in"}.get(f, f)
            out.append(f"static_assert(offsetof({name}, {cf}) == {getattr(cls, f).offset}, \"{name}.{cf}\");")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("opg,q", [(4, 4), (8, 4), (4, 0)])
def test_persistent_kernel_builds_for_sm90_with_matching_layout(opg, q, tmp_path, monkeypatch):
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin
    from decoder_shell.drivers.cuda.persistent import source
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    src, entry = source(opg, q)
    src = "#define offsetof(t, f) __builtin_offsetof(t, f)\n" + src + _layout_asserts()
    cubin = compile_cubin(src, "sm_90", EXACT_FLAGS, name="persistent.cu")
    assert entry.encode() in cubin


def test_layout_check_can_fail(tmp_path, monkeypatch):
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.errors import BuildError
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin
    from decoder_shell.drivers.cuda.persistent import source
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    src, _ = source(4, 0)
    bad = f"static_assert(sizeof(PStep) == {C.sizeof(S.PStep) + 8}, \"PStep size\");\n"
    with pytest.raises(BuildError, match="PStep size"):
        compile_cubin(src + bad, "sm_90", EXACT_FLAGS, name="persistent.cu")


# --- selection -----------------------------------------------------------------------------------
def test_cycle_selector_names_every_command_and_the_driver_takes_all_or_none():
    from decoder_shell.drivers.cuda import persistent_form
    from decoder_shell.errors import UsageError
    from decoder_shell.replay.candidates import make_plan
    cyc = build_cycle(Geometry(preset="t", hidden=64, layers=1, ranks=2, verify_rows=2, draft_rows=1), RingContract())
    plan = make_plan(cyc, ["cycle=persistent"])
    assert set(plan.variants) == {c.index for c in cyc.commands}
    assert persistent_form(cyc, plan.variants, "graph") == "persistent"
    assert persistent_form(cyc, {}, "persistent") == "persistent"
    assert persistent_form(cyc, {}, "graph") == ""
    with pytest.raises(UsageError, match="every command"):
        persistent_form(cyc, make_plan(cyc, ["verify:cycle=persistent"]).variants, "graph")


# --- on a GPU ------------------------------------------------------------------------------------
def _persistent_driver():
    from decoder_shell.drivers import get_driver
    from decoder_shell.errors import DriverUnavailable
    try:
        return get_driver("cuda", placement="emulated", cycle="persistent")
    except DriverUnavailable as e:
        pytest.skip(f"no CUDA GPU here: {e}")


@pytest.mark.gpu
def test_persistent_cycle_bit_exact_on_gpu_and_fma_build_caught():
    from decoder_shell.replay.selfcheck import run_case, self_check
    drv = _persistent_driver()
    summary = self_check(drv, cases=8, seed=1515, variants=False)
    assert summary["elements_compared"] > 0
    assert summary["mismatching_elements"] == 0, summary["failures"][:2]
    from decoder_shell.drivers import get_driver
    flags = self_check(get_driver("cuda", placement="emulated", cycle="persistent-flags"), cases=6, seed=1516,
                       variants=False)
    assert flags["elements_compared"] > 0 and flags["mismatching_elements"] == 0, flags["failures"][:2]
    cyc = build_cycle(Geometry(preset="t", hidden=4096, layers=1, ranks=2, verify_rows=2, draft_rows=0), RingContract())
    values = injected_values(cyc, 5)
    _, bad = run_case(drv, cyc, values, {c.index: "persistent-fma" for c in cyc.commands}, reference(cyc, values))
    assert sum(bad.values()) > 0


@pytest.mark.gpu
def test_one_persistent_kernel_per_rank_process_replays_exact():
    import subprocess
    import sys
    from pathlib import Path
    _persistent_driver()
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "decoder_shell.cli", "replay", str(root / "corpus"), "--driver", "cuda",
                        "--placement", "processes", "--cycle", "persistent", "--epochs", "6", "--changed", "2"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "6/6 graph epochs exact" in r.stdout and "2/2 changed epochs exact" in r.stdout


@pytest.mark.gpu
def test_watchdog_ends_a_barrier_that_never_completes():
    from decoder_shell.drivers.cuda.persistent import PersistentSession
    from decoder_shell.errors import MismatchError
    drv = _persistent_driver()
    cyc = build_cycle(Geometry(preset="t", hidden=256, layers=1, ranks=2, verify_rows=2, draft_rows=0), RingContract())
    with PersistentSession(drv, cyc, watchdog_ms=200, skip_step=2) as s:
        with pytest.raises(MismatchError, match="waited more than 200 ms") as e:
            s.run()
        assert "\n" not in str(e.value)


# --- lifecycle on the CPU: a ledger of driver calls stands in for the device ---------------------
class _PersistentLedger:
    """test_cuda_build's ledger plus the queries a persistent session makes (one SM holding `per_sm`)."""

    def __new__(cls, per_sm: int):
        from test_cuda_build import Ledger
        pytest.importorskip("cuda.bindings.driver", reason="cuda-python is the cuda extra")
        from cuda.bindings import driver

        class L(Ledger):
            QUIET = (*Ledger.QUIET, "cuDeviceGetAttribute")
            bindings = driver

            def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, *a):
                return per_sm
        return L([])


class _PDrv:
    def __init__(self, cu):
        self.cu, self.arch, self.sm, self.device, self.gpu = cu, "sm_90", 90, 0, "test device"


def test_persistent_session_builds_and_frees_everything(tmp_path, monkeypatch):
    from decoder_shell.drivers.cuda.persistent import PersistentSession
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    cyc = build_cycle(Geometry(preset="t", hidden=64, layers=1, ranks=2, verify_rows=2, draft_rows=1), RingContract())
    ledger = _PersistentLedger(per_sm=4)
    s = PersistentSession(_PDrv(ledger), cyc)
    assert s.blocks == 4 and s.node_count == 1  # as many as one SM holds: fewer than the largest step's items
    assert sorted(set(ledger.live.values())) == ["event", "mem", "module", "stream"]
    s.close()
    assert ledger.live == {}


def test_row_flag_mode_builds_its_counters_and_refuses_a_lone_allreduce(tmp_path, monkeypatch):
    from decoder_shell.drivers.cuda.persistent import PersistentSession
    from decoder_shell.errors import UsageError
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    cyc = build_cycle(Geometry(preset="t", hidden=64, layers=1, ranks=2, verify_rows=2, draft_rows=1), RingContract())
    ledger = _PersistentLedger(per_sm=4)
    with PersistentSession(_PDrv(ledger), cyc, flags=True) as s:
        assert s.flags and s.rows_off > s.detail_off
    assert ledger.live == {}
    i = next(c.index for c in cyc.commands if c.op != "allreduce" and c.index > 1)
    c = cyc.commands[i]  # a boundary that no longer reads the all-reduce before it: that one runs alone
    cyc.commands[i] = type(c)(c.index, c.boundary, {**c.inputs, "x": cyc.commands[i - 1].inputs["x"]}, c.outputs)
    ledger = _PersistentLedger(per_sm=4)
    with pytest.raises(UsageError, match="persistent-flags"):
        PersistentSession(_PDrv(ledger), cyc, flags=True)
    assert ledger.live == {}


def test_persistent_session_refuses_a_grid_the_device_cannot_hold(tmp_path, monkeypatch):
    from decoder_shell.drivers.cuda.persistent import PersistentSession
    from decoder_shell.errors import UsageError
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    cyc = build_cycle(Geometry(preset="t", hidden=64, layers=1, ranks=2, verify_rows=2, draft_rows=0), RingContract())
    ledger = _PersistentLedger(per_sm=2)
    with pytest.raises(UsageError, match=r"holds 2 blocks .* the grid needs 5") as e:
        PersistentSession(_PDrv(ledger), cyc, blocks=5)
    assert "\n" not in str(e.value)
    assert ledger.live == {}


def test_replay_cycle_persistent_is_a_cuda_option():
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "decoder_shell.cli", "replay", str(root / "corpus"), "--driver", "cpu",
                        "--cycle", "persistent"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--cycle persistent is a cuda driver option" in r.stderr
