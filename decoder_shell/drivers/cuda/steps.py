"""The persistent cycle's step list: what one resident kernel walks, and its device encoding.

A step is one mHC boundary (with the all-reduce right before it folded in when the boundary reads
its output) or a lone all-reduce; a grid barrier separates consecutive steps. A boundary that reads
post and comb made by an earlier boundary recomputes them from that boundary's partials (`prev`),
so the two never need a barrier of their own; the y and pre of a boundary are finished by the step
after it. This module is pure Python (no CUDA): the plan and the PStep table it encodes are tested
on the CPU by interpreting the table with the numpy contracts (tests/test_cuda_persistent.py).
"""

from __future__ import annotations

import ctypes as C
import os
from dataclasses import dataclass

import numpy as np

from ...commands.program import Command, Cycle
from ...contracts.numerics import BF16, LANES
from . import args as A

BLOCK = 128
LANE_GROUPS = LANES // BLOCK
NOUT = {"mhc_pre": 24, "mhc_post_pre": 24, "mhc_post_head": 4}
OP_CODE = {"mhc_pre": 0, "mhc_post_pre": 1, "mhc_post_head": 2}


class PStep(C.Structure):
    _fields_ = [*[(n, C.c_int) for n in ("kind", "op", "fused", "nout", "groups", "rows", "prev", "finish_pc",
                                         "nunits", "pad")],
                ("ar", A.ArArgs), ("mh", A.MhcArgs * A.MAXR), ("flag_out", A.u64 * A.MAXR), ("flag_in", A.u64),
                ("rows_done", A.u64)]


class PArgs(C.Structure):
    _fields_ = [("steps", A.u64), ("nsteps", C.c_int), ("ranks", C.c_int), ("bar", A.u64), ("err", A.u64),
                ("timeout_ns", A.u64), ("trace", A.u64), ("mode", C.c_int), ("skip_step", C.c_int),
                ("rank0", C.c_int), ("nlocal", C.c_int), ("detail", A.u64), ("sync", C.c_int), ("pad_", C.c_int),
                ("tag", A.u64)]


@dataclass(frozen=True)
class Step:
    """kind "mhc": command `cmd` (its all-reduce `ar` folded in, or None); kind "allreduce": `cmd` alone."""

    kind: str
    cmd: int
    ar: int | None
    prev: int  # step whose partials give post and comb (-1: read the input buffers)
    finish_pc: bool  # the finish of this boundary writes next_post / next_comb (no later step does)


def outputs_per_unit(cycle: Cycle) -> int:
    """Projection outputs per unit (the kernel's OPG, one per build): 8, so that a dsv4-flash TP4 M=2
    step (192 units + 64 finish items) fits one round of a 2-blocks-per-SM grid and every unit's
    Sinkhorn (recomputed per unit) is paid once per round; DECODER_SHELL_CUDA_PERSIST_OPG=4 for
    tuning runs (more blocks share the weight stream)."""
    env = os.environ.get("DECODER_SHELL_CUDA_PERSIST_OPG", "")
    return 4 if env == "4" else 8


def max_items(cycle: Cycle, steps: list[Step], nlocal: int | None = None) -> int:
    """The most work items (units + finish items of the step before) of any step, for `nlocal` ranks
    (default: all): the grid needs no more blocks."""
    g, R = cycle.geometry, nlocal or cycle.ranks
    opg = outputs_per_unit(cycle)
    best, pend = 1, 0
    for s in steps:
        c = cycle.commands[s.cmd]
        rows = g.phase(c.boundary.phase).rows
        if s.kind == "mhc":
            units = R * rows * LANE_GROUPS * (NOUT[c.op] // min(opg, NOUT[c.op]))
        else:
            units = -(-int(np.prod(cycle.buffers[c.inputs["x"]].shape)) // BLOCK)
        best = max(best, units + pend)
        pend = R * rows * LANE_GROUPS if s.kind == "mhc" else 0
    return max(best, pend)


def plan(cycle: Cycle) -> list[Step]:
    cmds = cycle.commands
    steps: list[Step] = []
    made_by: dict[int, int] = {}  # next_post buffer -> step of the boundary that makes it
    consumed: set[int] = set()
    folded = set()
    for i, c in enumerate(cmds):
        if c.op != "allreduce" and i > 0 and cmds[i - 1].op == "allreduce" \
                and cmds[i - 1].outputs["out"] == c.inputs.get("x"):
            folded.add(i - 1)
    for c in cmds:
        if c.op == "allreduce":
            if c.index not in folded:
                steps.append(Step("allreduce", c.index, None, -1, False))
            continue
        prev = -1
        if "post" in c.inputs and c.inputs["post"] in made_by:
            p = made_by[c.inputs["post"]]
            if cmds[steps[p].cmd].outputs.get("next_comb") == c.inputs["comb"]:
                prev = p
                consumed.add(p)
        ar = c.index - 1 if c.index - 1 in folded else None
        steps.append(Step("mhc", c.index, ar, prev, False))
        if "next_post" in c.outputs:
            made_by[c.outputs["next_post"]] = len(steps) - 1
    return [Step(s.kind, s.cmd, s.ar, s.prev, s.kind == "mhc" and "next_post" in cmds[s.cmd].outputs
                 and i not in consumed) for i, s in enumerate(steps)]


def encode(cycle: Cycle, steps: list[Step], addr, scratch, arrival=None) -> C.Array:
    """The device table: addr(rank, buffer) is a buffer's address, scratch(rank, cmd) a boundary's
    partials (M x 8 x (NOUT + 1) fp32). Output groups follow the kernel's outputs_per_unit. One
    process per rank: arrival(cmd) gives an all-reduce's (slot in every rank's memory, slots here)."""
    g = cycle.geometry
    opg = outputs_per_unit(cycle)
    R = cycle.ranks
    table = (PStep * len(steps))()
    for k, s in enumerate(steps):
        c = cycle.commands[s.cmd]
        e = table[k]
        e.prev, e.finish_pc = s.prev, int(s.finish_pc)
        rows = g.phase(c.boundary.phase).rows
        e.rows = rows
        ar_cmd = s.cmd if s.kind == "allreduce" else s.ar
        if arrival is not None and ar_cmd is not None:
            outs, e.flag_in = arrival(ar_cmd)
            for q, f in enumerate(outs):
                e.flag_out[q] = f
        if s.kind == "allreduce":
            bx = c.inputs["x"]
            n = int(np.prod(cycle.buffers[bx].shape))
            e.kind, e.nunits = 0, -(-n // BLOCK)
            for q in range(R):
                e.ar.inp[q] = addr(q, bx)
                e.ar.out[q] = addr(q, c.outputs["out"])
            e.ar.ring = A.ring(cycle.contract, n, R, cycle.buffers[bx].dtype == BF16)
            e.ar.lo, e.ar.hi = 0, n
            continue
        nout = NOUT[c.op]
        e.kind, e.op, e.fused, e.nout = 1, OP_CODE[c.op], int(s.ar is not None), nout
        e.groups = nout // min(opg, nout)
        e.nunits = R * rows * LANE_GROUPS * e.groups
        xbuf = cycle.buffers[c.inputs["x"]]
        for r in range(R):
            a = e.mh[r]
            a.x = addr(r, c.inputs["x"])
            a.x_is_bf16 = int(xbuf.dtype == BF16)
            if s.ar is not None:
                arc = cycle.commands[s.ar]
                for q in range(R):
                    a.peers[q] = addr(q, arc.inputs["x"])
                a.ar_out = addr(r, arc.outputs["out"])
                a.ring = A.ring(cycle.contract, int(np.prod(xbuf.shape)), R, xbuf.dtype == BF16)
            for name, field in (("residual", "residual"), ("post", "post_in"), ("comb", "comb_in")):
                if name in c.inputs:
                    setattr(a, field, addr(r, c.inputs[name]))
            a.fn, a.base, a.scale = (addr(r, c.inputs[n]) for n in ("fn", "base", "scale"))
            a.streams, a.y = addr(r, c.outputs["streams"]), addr(r, c.outputs["y"])
            if "next_post" in c.outputs:
                a.post_out, a.comb_out = addr(r, c.outputs["next_post"]), addr(r, c.outputs["next_comb"])
            a.scratch = scratch(r, c.index)
            a.M, a.D = rows, g.hidden
            a.sinkhorn_iters = g.mhc.sinkhorn_iters
            a.hc_eps, a.norm_eps = g.mhc.hc_eps, g.mhc.norm_eps
    return table


def weight_bytes(cycle: Cycle, step: Step) -> int:
    """Projection weight bytes a step reads over every rank (what its HBM time is made of)."""
    if step.kind != "mhc":
        return 0
    c: Command = cycle.commands[step.cmd]
    return cycle.buffers[c.inputs["fn"]].nbytes * cycle.ranks
