"""A cycle's launches, decided once at load: kernel, arguments and ranges for every command.

Emulated ranks: each buffer id owns one device allocation holding every rank's copy back to back
([ranks, ...]), so rank r's copy sits at a fixed offset and one all-reduce launch reads every rank.
An all-reduce is one launch that writes every rank's output; an mHC command is one launch per rank
(one work-group per row), so each rank's time can be measured on its own.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ...commands.program import Command, Cycle
from ...contracts.numerics import BF16, LANES
from ...errors import UsageError
from ...geometry import DENSE_OPS

#: Work-items per group of an all-reduce launch.
ALLREDUCE_GROUP = 256
#: Implementations a command can get here, name -> what it does (`shell gate --list-candidates`).
VARIANTS = {"baseline": "the driver's own SPIR-V kernels (one launch per all-reduce, one per rank and mHC boundary)",
            "delete": "no launch at all (deletion-only upper bound; outputs stay poisoned)"}
#: Kernels launched with the lane-tree group size.
GROUP_KERNELS = tuple(f"{op}_{t}" for op in ("mhc_pre", "mhc_post_pre", "mhc_post_head") for t in ("bf16", "f32"))


@dataclass(frozen=True)
class Arg:
    """One kernel argument: a buffer (by id) or a scalar with its C type ('u32', 'i32', 'f32')."""

    kind: str  # "buffer" | "u32" | "i32" | "f32" | "u64"; MoE launches also: "view" (buffer id, rank),
    value: int | float | tuple  # "scratch" (command, rank, name, bytes) and "tables" (moe_plan.py)


@dataclass(frozen=True)
class Launch:
    command: int
    rank: int | None  # None: one launch for every rank (an all-reduce)
    kernel: str
    args: tuple[Arg, ...]
    global_size: int
    local_size: int


#: The arena: one device allocation per session beside the cycle's buffers (moe_plan's scratch, the tables).
ARENA = "arena"
#: Byte alignment of every region in the arena.
ARENA_ALIGN = 256
#: The C type of each scalar argument kind.
SCALARS = {"u32": ctypes.c_uint32, "i32": ctypes.c_int32, "f32": ctypes.c_float, "u64": ctypes.c_uint64}


@dataclass(frozen=True)
class Arena:
    """Where each region a plan needs beyond the cycle's buffers sits in the session's arena: every
    "scratch" region (command, rank, name) and the decode tables ("tables"), at offsets fixed at
    load, so both paths allocate once and no epoch allocates."""

    regions: dict  # key -> (offset, bytes)
    nbytes: int


def arena(plan: list[Launch]) -> Arena:
    from ...contracts.quant import decode_tables  # the tables' size: one definition
    regions, end = {}, 0
    for launch in plan:
        for a in launch.args:
            key, size = ((a.value[:3], a.value[3]) if a.kind == "scratch" else
                         ("tables", decode_tables().nbytes) if a.kind == "tables" else (None, 0))
            if key is not None and key not in regions:
                regions[key] = (end, int(size))
                end += -(-max(int(size), 1) // ARENA_ALIGN) * ARENA_ALIGN
    return Arena(regions, end)


def locate(cyc: Cycle, layout: Arena, a: Arg) -> tuple | None:
    """Where a pointer argument points, as (allocation, byte offset, bytes): the allocation is a
    buffer id (every rank's copy back to back) or ARENA. None for a scalar. Both the SYCL path and
    the Level Zero command lists bind pointers through this one rule."""
    if a.kind == "buffer":
        return a.value, 0, max(cyc.buffers[a.value].nbytes, 1) * cyc.ranks
    if a.kind == "view":
        bid, rank = a.value
        n = cyc.buffers[bid].nbytes
        return bid, rank * n, n
    if a.kind in ("scratch", "tables"):
        return (ARENA, *layout.regions[a.value[:3] if a.kind == "scratch" else "tables"])
    return None


def scalar(a: Arg):
    """A scalar argument as its C value."""
    return SCALARS[a.kind](a.value)


def group_size(max_group: int) -> int:
    """Work-items per mHC group: the largest power of two <= min(LANES, device limit)."""
    g = 1
    while g * 2 <= min(LANES, max_group):
        g *= 2
    return g


def _suffix(dtype) -> str:
    return "bf16" if np.dtype(dtype) == BF16 else "f32"


def allreduce_launch(cyc: Cycle, cmd: Command) -> Launch:
    c, buf = cyc.contract, cyc.buffers[cmd.inputs["x"]]
    n = int(np.prod(buf.shape))
    per = max(1, c.max_chunk_bytes // buf.dtype.itemsize) if c.max_chunk_bytes else 0
    hop = int(c.accumulation == "hop" and buf.dtype == BF16)
    args = (Arg("buffer", cmd.inputs["x"]), Arg("buffer", cmd.outputs["out"]), Arg("u32", n),
            Arg("u32", cyc.ranks), Arg("u32", c.segments), Arg("u32", c.chunks_per_rank), Arg("u32", per),
            Arg("i32", c.offset), Arg("i32", c.direction), Arg("i32", hop))
    size = -(-max(n, 1) // ALLREDUCE_GROUP) * ALLREDUCE_GROUP
    return Launch(cmd.index, None, f"allreduce_{_suffix(buf.dtype)}", args, size, ALLREDUCE_GROUP)


def mhc_launches(cyc: Cycle, cmd: Command, group: int) -> list[Launch]:
    x = cyc.buffers[cmd.inputs["x"]]
    rows, d = x.shape
    p = cyc.geometry.mhc
    # mhc_pre reads no residual/post/comb and mhc_post_head writes no next_*: any buffer fills the slot.
    filler = cmd.inputs["x"]
    ids = [cmd.inputs.get(n, filler) for n in ("x", "residual", "post", "comb", "fn", "base", "scale")]
    ids += [cmd.outputs.get(n, filler) for n in ("streams", "y", "next_post", "next_comb")]
    out = []
    for r in range(cyc.ranks):
        args = (*(Arg("buffer", i) for i in ids), Arg("u32", r), Arg("u32", rows), Arg("u32", d),
                Arg("f32", p.hc_eps), Arg("f32", p.norm_eps), Arg("i32", p.sinkhorn_iters))
        out.append(Launch(cmd.index, r, f"{cmd.op}_{_suffix(x.dtype)}", args, rows * group, group))
    return out


def build_plan(cyc: Cycle, group: int, variants: dict | None = None) -> list[Launch]:
    variants = variants or {}
    for idx, v in variants.items():
        if v not in VARIANTS:
            raise UsageError(f"level-zero driver has no implementation {v!r} for command {idx}")
    plan: list[Launch] = []
    for cmd in cyc.commands:
        if variants.get(cmd.index) == "delete":
            continue
        if cmd.op.startswith("moe_"):
            from .moe_plan import moe_launches
            plan.extend(moe_launches(cyc, cmd))
            continue
        if cmd.op in DENSE_OPS:
            from .dense_plan import dense_launches
            plan.extend(dense_launches(cyc, cmd))
            continue
        plan.extend([allreduce_launch(cyc, cmd)] if cmd.op == "allreduce" else mhc_launches(cyc, cmd, group))
    return plan


def rank_times(cyc: Cycle, plan: list[Launch], durations_ms: list[float]) -> list[float]:
    """Per-rank cycle time: every all-reduce counts for every rank, an mHC launch for its own rank."""
    times = [0.0] * cyc.ranks
    for launch, ms in zip(plan, durations_ms):
        for r in (range(cyc.ranks) if launch.rank is None else (launch.rank,)):
            times[r] += ms
    return times
