"""Launches of the draft's dense attention commands (kernels/moe.cl `moe_qdq`, `dense_linear`) for the
SYCL path: per rank, one qdq launch per quantize command and one grouped-linear launch per projection
(commands/dense_ops.py); work-items: one per output element."""

from __future__ import annotations

from ...commands import dense_ops
from ...commands.program import Command, Cycle
from .moe_plan import FORMAT_CODES, GROUP, _qdq, _size, _v
from .plan import Arg, Launch


def dense_launches(cyc: Cycle, cmd: Command) -> list[Launch]:
    g = cyc.geometry
    m = g.phase(cmd.boundary.phase).rows
    t = {**cmd.inputs, **cmd.outputs}
    out = []
    for r in range(cyc.ranks):
        v = {name: _v(t, name, r) for name in t}
        if dense_ops.is_qdq(cmd.op):
            out.append(_qdq(cmd, r, v["x"], v["codes"], v["scales"], m, dense_ops.qdq_width(cmd.op, g)))
            continue
        groups, n, k, dtype = dense_ops.linear_shape(cmd.op, g)
        packed = g.moe.weights == "packed"
        fmt = FORMAT_CODES["fp8" if packed else "bf16"]
        args = (v["codes"], v["scales"], v["w"], v["s"] if packed else v["w"], Arg("u32", m), Arg("u32", groups),
                Arg("u32", n), Arg("u32", k), Arg("u32", fmt), Arg("u32", int(dtype == "bfloat16")), v["y"],
                Arg("tables", 0))
        out.append(Launch(cmd.index, r, "dense_linear", args, _size(m * groups * n), GROUP))
    return out
