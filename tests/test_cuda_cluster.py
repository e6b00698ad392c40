"""The cluster cycle (`--cycle persistent-cluster`, drivers/cuda/cluster_cycle.*) on the CPU: every kernel
instance builds for sm_90 with its argument struct laid out as the ctypes mirror says (no spills), the
fold order the kernel walks is the contract's for every member of the ring family, the cycles it is built
for are taken and the others refused in one line, and the selector takes the whole cycle. On a GPU: random
cycles bit-exact and the FMA build caught (tools/cluster_check.py runs more; docs/BENCHMARKS.md)."""

from __future__ import annotations

import ctypes as C
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoder_shell.commands.program import build_cycle
from decoder_shell.contracts.allreduce import RingContract, rank_order
from decoder_shell.drivers.cuda import cluster_cycle as cc, steps as S
from decoder_shell.drivers.cuda.cluster_cycle import (CLUSTER_SOURCES, HIDDEN, ONE_GROUP_ROWS, RPC_BUILDS, THREAD_BUILDS,
                                                      THREADS, CArgs, block_threads, check_cycle, row_groups, source)
from decoder_shell.errors import UsageError
from decoder_shell.geometry import Geometry, preset


def _layout_asserts() -> str:
    out = [f"static_assert(sizeof(CArgs) == {C.sizeof(CArgs)}, \"CArgs size\");"]
    for f, _ in CArgs._fields_:
        out.append(f"static_assert(offsetof(CArgs, {f}) == {getattr(CArgs, f).offset}, \"CArgs.{f}\");")
    out.append(f"static_assert(sizeof(PStep) == {C.sizeof(S.PStep)}, \"PStep size\");")
    return "#define offsetof(t, f) __builtin_offsetof(t, f)\n" + "\n".join(out) + "\n"


def test_every_piece_of_the_kernel_source_is_joined_once_and_the_kernel_last():
    """CLUSTER_SOURCES names every cluster_*.cu file beside it once, the kernel last, in the order a build
    joins them: a piece left out of the tuple would be a file no build reads."""
    here = Path(cc.__file__).parent
    assert sorted(CLUSTER_SOURCES) == sorted(p.name for p in here.glob("cluster_*.cu"))
    assert len(set(CLUSTER_SOURCES)) == len(CLUSTER_SOURCES) and CLUSTER_SOURCES[-1] == "cluster_cycle.cu"
    # each piece's text, in order, is the source a build compiles
    src, _ = source(4, 2)
    at = [src.index((here / f).read_text()) for f in CLUSTER_SOURCES]
    assert at == sorted(at)


@pytest.mark.parametrize("q,rpc,threads", [(4, r, t) for r in RPC_BUILDS for t in THREAD_BUILDS] + [(1, 1, 512), (2, 8, 256)])
def test_every_instance_builds_for_sm90_without_spills_and_with_matching_layout(q, rpc, threads, tmp_path, monkeypatch):
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.nvrtc import ptxas_report
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    src, entry = source(q, rpc, threads)
    rep = ptxas_report(src + _layout_asserts(), "sm_90", name="cluster_cycle.cu")[entry]
    assert rep["spill_stores"] == 0 and rep["spill_loads"] == 0 and rep["stack"] == 0, rep
    assert rep["registers"] <= 255 and rep["smem"] < 48 * 1024, rep  # static; the weights are dynamic


@pytest.mark.parametrize("ranks", [1, 3, 8])
def test_the_fold_builds_for_every_rank_count(ranks, tmp_path, monkeypatch):
    """The all-reduce fold is unrolled over the cycle's ranks (a build parameter): the ends of the range
    and an odd count build without spills too (the instance test above builds four ranks)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.nvrtc import ptxas_report
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    src, entry = source(4, 8, THREADS, ranks)
    assert entry.endswith(f"_n{ranks}")
    rep = ptxas_report(src, "sm_90", name="cluster_cycle.cu")[entry]
    assert rep["spill_stores"] == 0 and rep["spill_loads"] == 0 and rep["stack"] == 0, rep


@pytest.mark.parametrize("rpc", [2, 8])
def test_the_kernel_refuses_to_build_with_less_dynamic_shared_memory_than_it_addresses(rpc, tmp_path, monkeypatch):
    """The launch's dynamic shared memory (dyn_smem_bytes) is checked against what the kernel addresses
    (weights, then every block's partials) at build time: one byte less does not build (two rows: two steps'
    weights and partials sized for the build; eight rows: one step's)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.cluster_cycle import dyn_smem_bytes
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin
    from decoder_shell.errors import BuildError
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    src, entry = source(4, rpc)
    n = dyn_smem_bytes(4, rpc)
    assert f"<= {n}," in src
    assert entry.encode() in compile_cubin(src, "sm_90", EXACT_FLAGS, name="cluster_cycle.cu")
    short = src.replace(f"<= {n},", f"<= {n - 1},")
    with pytest.raises(BuildError, match="dynamic shared memory"):
        compile_cubin(short, "sm_90", EXACT_FLAGS, name="cluster_cycle.cu")


@pytest.mark.parametrize("q", [1, 2, 4])
def test_the_weights_box_is_the_hosts(q, tmp_path, monkeypatch):
    """The kernel's compile-time tensor-map box (cl_box_rows: how many copies a step's weights take, and
    where each lands) is asserted equal to the box the host encodes the maps with: a host box one row
    short does not build."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin
    from decoder_shell.errors import BuildError
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    box = cc.box_rows(q)
    assert box <= 256 and (24 * 4 * q) % box == 0  # a box dimension is at most 256; whole boxes a step
    src, entry = source(q, 2)
    assert entry.encode() in compile_cubin(src, "sm_90", EXACT_FLAGS, name="cluster_cycle.cu")
    monkeypatch.setattr(cc, "box_rows", lambda q: box - 1)
    with pytest.raises(BuildError, match="tensor-map box"):
        compile_cubin(cc.source(q, 2)[0], "sm_90", EXACT_FLAGS, name="cluster_cycle.cu")


def test_the_fma_build_compiles_too(tmp_path, monkeypatch):
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.nvrtc import FMA_FLAGS, compile_cubin
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    src, entry = source(4, 2)
    assert entry.encode() in compile_cubin(src, "sm_90", FMA_FLAGS, name="cluster_cycle.cu")


@pytest.mark.parametrize("defines,rpc", [(d, 2) for d in [
    "CL_NO_JOIN", "CL_NO_FETCH", "CL_FOLD_NOLOAD", "CL_ISOLATE_SK=1", "CL_PREFETCH_EARLY CL_LOOKAHEAD=4",
    "CL_WARP_STAMPS=1", "CL_SM_STAMP=1", "CL_C_SKIP", "CL_C_NOSTORE",
    "CL_EVICT_FIRST=0 CL_PART_AHEAD=1", "CL_COUNTER_JOIN", "CL_LL_WORDS=4", "CL_JOIN_RELEASE",
    "CL_JOIN_RELEASE CL_COUNTER_JOIN", "CL_DOT_UNROLL=16", "CL_DOT_SPLIT_ROWS=4", "CL_LL_WORDS=24", "CL_LL_SPLIT=0",
    "CL_LL_WORDS32=8", "CL_DOT_LANES=2", "CL_DOT_LANES=9", "CL_LL_NOWAIT", "SINKHORN_DIV_SHORT=0",
    "SINKHORN_UNROLL=8", "CL_LANES_UNROLL2=4", "ABL_W4", "ABL_SV4", "ABL_W4 ABL_SV4", "CL_W_LDG", "CL_LL_PACK3=1",
    "CL_LL_THIRD", "CL_FOLD_NONE", "CL_NO_AROUT", "CL_NO_PF_B", "CL_C_TWICE", "CL_A_TWICE", "CL_ROLES_CARRIED=0",
    "CL_SV_PAIRS=1", "CL_ENTRY_STAMP=1", "CL_SV_LANE2=1", "CL_FETCH_LAST=1 CL_SV_LANE2=1", "CL_WAIT_STAMP=1 CL_SM_STAMP=1", "CL_PUSH_ROT=8", "CL_PUSH_W0=15",
    "CL_B_HALF=0", "CL_B_LOAD=1", "CL_B_HALF=3 CL_B_LOAD=1"]] + [
    (d, r) for d in ["CL_WBUF2=0", "CL_WBUF2=1 CL_WBUF2_RPC=1", "CL_WBUF2=0 CL_WSPARE=0"] for r in (1, 2)] + [(d, 8) for d in [
    "CL_DOT_LANES=9", "CL_DOT_LANES=9 CL_DOT_TILE=0", "CL_LANES_UNROLL=2", "CL_WBUF2=0", "ABL_W4 ABL_SV4", "CL_W_LDG",
    "CL_LL_PACK3=1", "CL_SV_PAIRS=9 CL_SV_LANE2=9", "CL_SV_LANE2=9", "CL_Y_REGS=1", "CL_Y_REGS=1 CL_PUB_REGS=1", "CL_WSPARE=8", "CL_WSPARE=8 CL_WSPARE_AT=1", "CL_WSPARE=8 CL_NO_FETCH", "CL_FETCH_LAST=1", "CL_PUSH_W0=15"]] + [
    (d, 4) for d in ["CL_WSPARE=0", "CL_WSPARE_AT=1", "CL_NO_FETCH", "CL_W_LDG", "CL_PUSH_W0=0"]])
def test_every_tuning_and_timing_define_builds(defines, rpc, tmp_path, monkeypatch):
    """The defines tools/gpu_cluster.sh VARIANTS take: a tuning run on the GPU must not find a build error
    (the dot products' defines at eight rows too, where their loops differ)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    monkeypatch.setenv("DECODER_SHELL_CUDA_DEFINES", defines)
    src, entry = source(4, rpc)
    assert entry.encode() in compile_cubin(src, "sm_90", EXACT_FLAGS, name="cluster_cycle.cu")


@pytest.mark.parametrize("defines,why", [("CL_SM_STAMP=1 CL_WARP_STAMPS=1", "stamp 14 holds either"),
                                         ("CL_WAIT_STAMP=1 CL_WARP_STAMPS=1", "stamps 11 and 12 hold either"),
                                         ("CL_PUSH_ROT=4", "one destination a warp")])
def test_stamps_that_share_a_slot_are_refused_together(defines, why, tmp_path, monkeypatch):
    """Stamp 14 holds either each block's SM (CL_SM_STAMP) or a warp's arrival (CL_WARP_STAMPS), stamps 11 and 12
    either thread 0's waits (CL_WAIT_STAMP) or warps' arrivals: a build asking for both stops at compile time instead
    of tracing one over the other. The pushes' rotation (CL_PUSH_ROT) is a 16-warp diagnosis, refused at 8 warps."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin
    from decoder_shell.errors import BuildError
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    monkeypatch.setenv("DECODER_SHELL_CUDA_DEFINES", defines)
    src, _ = source(4, 2, 256) if "PUSH_ROT" in defines else source(4, 2)
    with pytest.raises(BuildError, match=why):
        compile_cubin(src, "sm_90", EXACT_FLAGS, name="cluster_cycle.cu")


def _cubin(monkeypatch, defines: str, rpc: int, ranks: int = 4) -> bytes:
    """The cluster build (Q = 4, rpc rows, ranks, 512 threads) compiled for sm_90 under `defines`, its entry in it."""
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin
    monkeypatch.setenv("DECODER_SHELL_CUDA_DEFINES", defines)
    src, entry = source(4, rpc, THREADS, ranks)
    out = compile_cubin(src, "sm_90", EXACT_FLAGS, name="cluster_cycle.cu")
    assert entry.encode() in out
    return out


@pytest.mark.parametrize("ranks,rpc,differs", [(1, 2, True), (2, 1, True), (1, 4, False), (2, 8, False), (4, 2, False)])
def test_a_lone_sinkhorn_warp_keeps_its_scheduler_where_measured_faster(ranks, rpc, differs, tmp_path, monkeypatch):
    """CL_ISOLATE_SK=2 (the default) leaves a lone Sinkhorn warp's scheduler to it (roles_of: fewer helpers, NH_MIN)
    in the one- and two-row builds of one or two ranks, and nowhere else: those builds' code is not rule 0's, the
    others' (four-row and eight-row builds, whose helpers' registers are sized by the fewest helpers, and four ranks)
    is rule 0's byte for byte."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    assert (_cubin(monkeypatch, "", rpc, ranks) != _cubin(monkeypatch, "CL_ISOLATE_SK=0", rpc, ranks)) == differs


@pytest.mark.parametrize("rpc", [2, 4])
def test_warp_0_pushes_the_partials_in_the_four_row_build_only(rpc, tmp_path, monkeypatch):
    """CL_PUSH_W0=4 (the default): the four-row build is the build of warp 0 pushing every piece (CL_PUSH_W0=15,
    measured faster there and slower at one, two and eight rows), the others keep warp w pushing to block w
    (CL_PUSH_W0=0) byte for byte."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    cubins = {defines: _cubin(monkeypatch, defines, rpc) for defines in ("", "CL_PUSH_W0=0", "CL_PUSH_W0=15")}
    assert cubins["CL_PUSH_W0=0"] != cubins["CL_PUSH_W0=15"]
    assert cubins[""] == (cubins["CL_PUSH_W0=15"] if rpc == 4 else cubins["CL_PUSH_W0=0"])


@pytest.mark.parametrize("rpc", RPC_BUILDS)
def test_b_roles_on_half_the_warps_in_the_two_row_build_of_four_ranks_only(rpc, tmp_path, monkeypatch):
    """CL_B_HALF=2 (the default, a mask of row counts): the two-row build of more than two ranks puts B's roles on
    warps 0-7 (measured faster there, slower at one row and at two ranks, where warps beside the Sinkhorn warp idle
    instead); every other build is CL_B_HALF=0's byte for byte, and the load beside B (CL_B_LOAD, a diagnosis) and
    B's prefetches issued by a helper or by an idle warp (CL_PF_B_BH=1, 2) change only the builds that have their roles
    on half the warps."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))

    def cubin(defines: str, ranks: int) -> bytes:
        return _cubin(monkeypatch, defines, rpc, ranks)

    none, every, default = cubin("CL_B_HALF=0", 4), cubin("CL_B_HALF=3", 4), cubin("", 4)
    assert default == (every if rpc == 2 else none)
    assert (every != none) == (rpc <= 2)
    for other in ("CL_B_LOAD=1", "CL_PF_B_BH=1", "CL_PF_B_BH=2"):
        assert (cubin(f"CL_B_HALF=3 {other}", 4) != every) == (rpc <= 2)
    if rpc <= 2:
        assert cubin("CL_B_HALF=3", 2) == cubin("CL_B_HALF=0", 2)


@pytest.mark.parametrize("ranks,rpc", [(1, 2), (2, 1), (2, 4), (4, 2)])
def test_b_prefetches_only_at_more_than_two_ranks(ranks, rpc, tmp_path, monkeypatch):
    """CL_PF_B_MIN_R=3 (the default): builds of one and two ranks issue no L2 prefetch in B, and are the cubins
    measured as CL_NO_PF_B byte for byte; the builds of more ranks are CL_PF_B_MIN_R=1's (every build issues them)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))

    def cubin(defines: str) -> bytes:
        return _cubin(monkeypatch, defines, rpc, ranks)

    default, every = cubin(""), cubin("CL_PF_B_MIN_R=1")
    assert default == (cubin("CL_PF_B_MIN_R=1 CL_NO_PF_B") if ranks <= 2 else every)
    assert (default != every) == (ranks <= 2)


def test_b_prefetches_can_be_timed_apart_where_they_are_issued(tmp_path, monkeypatch):
    """CL_PF_B_ONLY=1 / 2 (a diagnosis) keeps only the partial sums' or only the weights' L2 prefetch in B: in the
    four-row build of four ranks, which issues both, the three cubins differ (a define that changed nothing would time
    nothing)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    assert len({_cubin(monkeypatch, d, 4) for d in ("", "CL_PF_B_ONLY=1", "CL_PF_B_ONLY=2")}) == 3


def _elem_of(i: np.ndarray, block: int, q: int) -> np.ndarray:
    """cluster_fold.cu elem_of for row0 = 0: slice element i of block `block` -> its index in a [rows][1024 q]."""
    return (i // (q * 64)) * (q * 1024) + 64 * block + i % 64 + ((i // 64) % q) * 1024


@settings(max_examples=200, deadline=None)
@given(q=st.integers(1, 8), rows=st.integers(1, 8), extra=st.integers(0, 7))
def test_the_packed_words_of_every_block_have_distinct_slots_inside_a_ranks_region(q, rows, extra):
    """CL_LL_PACK3's word k of a block (its slice elements 3k .. 3k + 2) lives at slot3(k) = elem_of(3k) / 2 of a
    rank's region of stride / 2 64-bit words (stride: the most rows of a step x D): no two words of the 16 blocks
    may share a slot, and every slot must lie inside the region, for a step of any rows up to the most."""
    n = rows * q * 64
    k = np.arange((n + 2) // 3)
    slots = np.concatenate([_elem_of(3 * k, b, q) >> 1 for b in range(16)])
    assert len(np.unique(slots)) == len(slots)
    assert slots.min() >= 0 and slots.max() < (rows + extra) * q * 1024 // 2


@settings(max_examples=200, deadline=None)
@given(cpr=st.integers(1, 3), cap=st.sampled_from([0, 0, 64, 1000]), offset=st.integers(-3, 3),
       direction=st.sampled_from([1, -1]), segments=st.integers(1, 3), ranks=st.integers(1, 8),
       n=st.integers(1, 5000), bf16=st.booleans())
def test_the_kernel_walk_from_the_first_rank_is_the_contract_order(cpr, cap, offset, direction, segments, ranks, n,
                                                                   bf16):
    """fold_x reads rank_order's first rank per element from the host table and steps by `direction`
    with wrap-around: that walk must give every later row of the contract's order."""
    c = RingContract(chunks_per_rank=cpr, max_chunk_bytes=cap, offset=offset, direction=direction, segments=segments)
    order = rank_order(c, n, ranks, 2 if bf16 else 4)
    first = order[0].astype(np.uint8)
    walk = [first.astype(np.int64)]
    for _ in range(1, ranks):
        r = walk[-1] + direction
        walk.append(np.where(r == ranks, 0, np.where(r < 0, ranks - 1, r)))
    np.testing.assert_array_equal(np.stack(walk), order)


@pytest.mark.parametrize("hidden", HIDDEN)
def test_cycles_of_every_built_hidden_size_and_both_draft_kinds_are_taken(hidden):
    for kind in ("mtp1", "dspark"):
        cyc = build_cycle(Geometry(preset="t", hidden=hidden, layers=2, ranks=3, verify_rows=5, draft_rows=2,
                                   draft_kind=kind), RingContract())
        check_cycle(cyc, S.plan(cyc))
    cyc = build_cycle(preset("dsv4-flash", tp=4, verify_rows=2, draft_rows=1), RingContract())
    check_cycle(cyc, S.plan(cyc))


def test_other_hidden_sizes_and_unlinked_boundaries_are_refused_in_one_line():
    cyc = build_cycle(Geometry(preset="t", hidden=64, layers=1, ranks=2, verify_rows=2, draft_rows=1), RingContract())
    with pytest.raises(UsageError, match="hidden sizes") as e:
        check_cycle(cyc, S.plan(cyc))
    assert "\n" not in str(e.value)
    cyc = build_cycle(Geometry(preset="t", hidden=1024, layers=2, ranks=2, verify_rows=2, draft_rows=0), RingContract())
    # a boundary whose residual is an older boundary's streams (not the one before it)
    i = [c.index for c in cyc.commands if c.op == "mhc_post_pre"][1]
    first = next(c for c in cyc.commands if c.op == "mhc_pre")
    c = cyc.commands[i]
    cyc.commands[i] = type(c)(c.index, c.boundary, {**c.inputs, "residual": first.outputs["streams"]}, c.outputs)
    with pytest.raises(UsageError, match="reads outputs of a boundary other than the one before it"):
        check_cycle(cyc, S.plan(cyc))


@pytest.mark.parametrize("value", ["", "256", "512", " 512 ", "128", "1024", "abc", "-512", "512.0"])
def test_block_threads_takes_the_built_counts_and_refuses_others_in_one_line(value, monkeypatch):
    monkeypatch.setenv("DECODER_SHELL_CUDA_CLUSTER_THREADS", value)
    want = int(value) if value.strip().isdigit() else THREADS if not value.strip() else None
    if want in THREAD_BUILDS:
        assert block_threads() == want
    else:
        with pytest.raises(UsageError, match="built for 256 or 512 threads a block") as e:
            block_threads()
        assert "\n" not in str(e.value) and value.strip() in str(e.value)


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 8), ranks=st.integers(1, 8), most=st.integers(1, 16), env=st.sampled_from([0, 0, 1, 2, 3]))
def test_row_groups_keep_one_cluster_a_rank_for_few_rows_and_fill_the_device_otherwise(rows, ranks, most, env):
    """Up to ONE_GROUP_ROWS rows a rank is one cluster (its join stays inside it); more rows spread over as many
    clusters as the device holds beside the other ranks', never more than the rows; the environment decides
    where it is set."""
    g = row_groups(rows, ranks, most, env)
    if env:
        assert g == env
    elif rows <= ONE_GROUP_ROWS:
        assert g == 1
    else:
        assert 1 <= g <= rows and (g == 1 or ranks * g <= most)
        assert g == rows or ranks * (g + 1) > most  # no room left for another group a rank


def test_the_selector_takes_the_whole_cycle():
    from decoder_shell.drivers.cuda import PERSISTENT_VARIANTS, persistent_form
    from decoder_shell.replay.candidates import make_plan
    cyc = build_cycle(Geometry(preset="t", hidden=1024, layers=1, ranks=2, verify_rows=2, draft_rows=1), RingContract())
    plan = make_plan(cyc, ["cycle=persistent-cluster"])
    assert "persistent-cluster" in PERSISTENT_VARIANTS
    assert persistent_form(cyc, plan.variants, "graph") == "persistent-cluster"
    with pytest.raises(UsageError, match="replaces every command"):
        persistent_form(cyc, {0: "persistent-cluster"}, "graph")


def test_auto_takes_the_cluster_cycle_only_where_it_was_measured_faster():
    """`--cycle auto`: the cluster kernel for cycles of at most AUTO_MAX_ROWS rows a step that it runs
    (sm_90+, emulated ranks, no MoE, no fused norm, a built hidden size), the graph for every other."""
    from decoder_shell.drivers.cuda.cluster_cycle import AUTO_MAX_ROWS, auto_fits
    from decoder_shell.geometry import MoeShape

    def cyc(**kw):
        return build_cycle(Geometry(**{"preset": "t", "hidden": 1024, "layers": 2, "ranks": 4, "verify_rows": 2,
                                       "draft_rows": 1, **kw}), RingContract())
    flash = build_cycle(preset("dsv4-flash", tp=4, verify_rows=2, draft_rows=1), RingContract())
    assert auto_fits(90, "emulated", flash) and auto_fits(100, "emulated", cyc(verify_rows=1, draft_rows=0))
    assert AUTO_MAX_ROWS == 8
    for m in (3, 4, 8):  # measured faster at 4 and 8 rows too (eighth session)
        assert auto_fits(90, "emulated", cyc(verify_rows=m))
    assert not auto_fits(90, "emulated", cyc(verify_rows=9))  # more rows than the largest build
    assert not auto_fits(90, "emulated", cyc(verify_rows=2, draft_rows=9))  # any phase's rows count
    assert not auto_fits(80, "emulated", flash)  # no thread-block clusters
    assert not auto_fits(90, "processes", flash)  # one process per rank
    assert not auto_fits(90, "emulated", cyc(hidden=64))  # not a built hidden size
    assert not auto_fits(90, "emulated", cyc(fused_norm=True))
    assert not auto_fits(90, "emulated", cyc(layers=1, ranks=2, moe=MoeShape(experts=8, top_k=3, width=128,
                                                                            combine="official")))


@pytest.mark.gpu
def test_random_cycles_bit_exact_and_fma_caught_on_gpu():
    import sys
    from pathlib import Path
    from decoder_shell.drivers import get_driver
    from decoder_shell.errors import DriverUnavailable
    try:
        drv = get_driver("cuda", placement="emulated")
    except DriverUnavailable as e:
        pytest.skip(f"no CUDA GPU here: {e}")
    if drv.sm < 90:
        pytest.skip(f"the cluster cycle needs sm_90 ({drv.arch} here)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import cluster_check
    out = cluster_check.exactness(drv, 3, 20261201)
    assert out["elements_compared"] > 0 and out["mismatching_elements"] == 0, out["failures"]
    assert cluster_check.fma_caught(drv, 3) > 0


@pytest.mark.parametrize("ranks", [1, 4])
def test_the_sync_bench_builds_on_the_cycle_source_with_the_hosts_layout(ranks, monkeypatch, tmp_path):
    """tools/sync_bench.py times the cycle's own synchronization functions: its kernel is the cycle's source
    with the bench appended, and its argument struct must be the one the host packs (offsets and size, checked
    by the compiler), without spills."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    import ctypes as C
    import sys
    from pathlib import Path
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, ptxas_report
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from sync_bench import SArgs, bench_source
    src, entry = bench_source(ranks)
    assert src.startswith(source(4, 2, 512, ranks)[0])
    layout = "".join(f"static_assert(__builtin_offsetof(SArgs, {f}) == {getattr(SArgs, f).offset}, \"{f}\");\n"
                     for f, _ in SArgs._fields_) + f"static_assert(sizeof(SArgs) == {C.sizeof(SArgs)}, \"size\");\n"
    r = ptxas_report(src + layout, "sm_90", EXACT_FLAGS, "sync_bench.cu")[entry]
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack"] == 0, r


@pytest.mark.parametrize("defines", ["", "CL_WBUF2=0", "CL_WBUF2=1 CL_WBUF2_RPC=4", "CL_WSPARE=0", "CL_WBUF2=0 CL_WSPARE=0",
                                     "CL_WSPARE=8"])
def test_every_build_fits_an_sms_shared_memory_with_its_weight_slots(defines, monkeypatch, tmp_path):
    """Two steps' weights (CL_WBUF2, the default) double a block's largest piece of shared memory: the host gives a build
    the second buffer only where its static shared memory leaves room (at most CL_WBUF2_RPC rows, 2), and the others
    one step's boxes and, with at most CL_WSPARE rows (4), a spare one; every build's static (ptxas) plus dynamic (dyn_smem_bytes, the
    launch's) shared memory must fit the 227 KiB a block may hold on sm_90. CL_WBUF2_RPC=4 asks for a build that does
    not fit (by 384 bytes): found here."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.cluster_cycle import dyn_smem_bytes, weight_buffers, weight_slots
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, ptxas_report
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    monkeypatch.setenv("DECODER_SHELL_CUDA_DEFINES", defines)
    for rpc in RPC_BUILDS:
        two = "CL_WBUF2=0" not in defines and rpc <= (4 if "RPC=4" in defines else 2)
        assert weight_buffers(rpc) == (2 if two else 1)
        box = 192 * 64 * 4  # a box: 192 of a step's [24][4Q] rows x 64 lanes, fp32 (Q = 4: two boxes a step)
        spare = 0 if "CL_WSPARE=0" in defines else 8 if "CL_WSPARE=8" in defines else 4  # its most rows
        slots = 4 if two else 3 if rpc <= spare else 2
        assert weight_slots(4, rpc) == slots
        partials = 2 * 16 * 4 * -(-(rpc if two else 8) * 25 // 4) * 4  # recv: its rows' 16-byte pieces, two steps
        assert dyn_smem_bytes(4, rpc) == slots * box + partials
        src, entry = source(4, rpc)
        flags = (*EXACT_FLAGS, *(f"-D{d}" for d in defines.split()))  # (the compiler sees what the host reads)
        static = ptxas_report(src, "sm_90", flags, "cluster_cycle.cu")[entry]["smem"]
        fits = static + dyn_smem_bytes(4, rpc) <= 227 * 1024
        assert fits == (rpc != 4 or "RPC=4" not in defines), (rpc, static, dyn_smem_bytes(4, rpc))
    for q in (1, 2):  # one box a step: the spare slot is a second buffer
        two4 = "CL_WBUF2=0" not in defines and "RPC=4" in defines  # rpc 4 with two buffers: two slots as well
        assert weight_slots(q, 4) == (2 if two4 or "CL_WSPARE=0" not in defines else 1)
        assert weight_slots(q, 8) == (2 if "CL_WSPARE=8" in defines else 1)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), q=st.sampled_from([1, 2, 4]))
def test_mix_scale_division_by_n_is_the_multiplication_by_its_reciprocal(seed, q):
    """mix_scale computes ss / N as ss * (1 / N): N = 4096 Q is a power of two, so both round the same real number
    once, over every class of fp32 (subnormal results, zeros, infinities, the largest values) bit for bit."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    bits[:6] = [0, 1, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F800000]
    ss = bits.view(np.float32)
    n = np.float32(4 * 1024 * q)
    with np.errstate(all="ignore"):
        div, mul = ss / n, ss * (np.float32(1) / n)
    same = (div.view(np.uint32) == mul.view(np.uint32)) | (np.isnan(div) & np.isnan(mul))
    assert same.all()


def test_rank_barrier_window_issues_prefetches_without_waiting_for_a_load(tmp_path, monkeypatch):
    """Between a helper's arrival at the rank's barrier and its wait (UCGABAR_ARV .. UCGABAR_WAIT in SASS) the block's
    prefetches are issued, and no load may be there: its register is used at once (the address of a prefetch loaded
    in that window stalled a helper warp ahead of its publish, an L2 round trip every step, until the addresses were
    loaded at the step's start)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin, disassemble, sass_instructions, sass_opcode
    from decoder_shell.errors import DriverUnavailable
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    src, entry = source(4, 2, 512)
    try:
        text = disassemble(compile_cubin(src, "sm_90", EXACT_FLAGS, name="cluster_cycle.cu"))
    except DriverUnavailable as e:
        pytest.fail(str(e))
    windows, cur = [], None
    for _, ins in sass_instructions(text, entry):
        name = sass_opcode(ins)[0]
        if name == "UCGABAR_ARV":
            cur = []
        elif name == "UCGABAR_WAIT" and cur is not None:
            windows.append(cur)
            cur = None
        elif cur is not None:
            cur.append(name)
    with_prefetch = [w for w in windows if any(n.startswith("UBLKPF") for n in w)]
    assert with_prefetch, "the prefetches are no longer issued inside the rank's barrier"
    for w in windows:
        loads = [n for n in w if n.startswith(("LDG", "LD.")) or n == "LD"]
        assert not loads, loads
