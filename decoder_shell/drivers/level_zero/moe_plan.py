"""Launches of the MoE draft commands (kernels/moe.cl) for the SYCL path, decided once at load.

Every MoE launch serves one rank: its buffer arguments are that rank's slices ("view" args: buffer
id and rank), and the routed / shared commands stage h and its act_qdq codes and scales in scratch
allocations of their own ("scratch" args), made once per session. Work-items: one per output row.
"""

from __future__ import annotations

from ...commands.program import Command, Cycle
from ...geometry import MOE_OPS
from ..cuda.moe import strides  # the byte strides of a weight stack, shared with the CUDA kernels
from .plan import Arg, Launch

GROUP = 16
FORMAT_CODES = {"mxfp4": 0, "fp8": 1, "bf16": 2}


def _size(n: int) -> int:
    return max(-(-n // GROUP) * GROUP, GROUP)


def _v(cmd_map: dict, name: str, rank: int) -> Arg:
    return Arg("view", (cmd_map[name], rank))


def _s(cmd: Command, rank: int, name: str, nbytes: int) -> Arg:
    return Arg("scratch", (cmd.index, rank, name, int(nbytes)))


def _linear(cmd, r, fmt, xc, xs, ids, rw, rows, topk, act_per_slot, w, s, experts, mats, n, k, swiglu, out):
    st = strides(fmt, experts, mats, n, k)
    none = Arg("tables", 0)  # any buffer fills an unused pointer slot
    args = (xc, xs, ids or none, rw or none, Arg("u32", rows), Arg("u32", topk), Arg("u32", int(act_per_slot)),
            Arg("u32", int(ids is not None)), Arg("u32", int(rw is not None)), w, s or none,
            *(Arg("u64", st[f]) for f in ("w_estride", "w_mstride", "w_rstride", "s_estride", "s_mstride")),
            Arg("u32", k), Arg("u32", n), Arg("u32", experts), Arg("u32", FORMAT_CODES[fmt]), Arg("u32", int(swiglu)),
            out, Arg("tables", 0))
    return Launch(cmd.index, r, "moe_linear", args, _size(experts * n), GROUP)


def _qdq(cmd, r, x, codes, scales, rows, k):
    return Launch(cmd.index, r, "moe_qdq", (x, codes, scales, Arg("tables", 0), Arg("u32", rows), Arg("u32", k)),
                  _size(rows * k // 32), GROUP)


def moe_launches(cyc: Cycle, cmd: Command) -> list[Launch]:
    g, moe = cyc.geometry, cyc.geometry.moe
    m = g.phase(cmd.boundary.phase).rows
    d, e, k, i = g.hidden, moe.experts, moe.top_k, moe.width // g.ranks
    t = {**cmd.inputs, **cmd.outputs}
    out = []
    for r in range(cyc.ranks):
        v = {name: _v(t, name, r) for name in t}
        if cmd.op == "moe_qdq":
            out.append(_qdq(cmd, r, v["x"], v["codes"], v["scales"], m, d))
        elif cmd.op == "moe_gate":
            out.append(Launch(cmd.index, r, "moe_gate", (v["x"], v["weight"], v["bias"], v["ids"], v["weights"],
                                                         Arg("u32", m), Arg("u32", d), Arg("u32", e), Arg("u32", k),
                                                         Arg("f32", 1.5)), _size(m), GROUP))
        elif cmd.op in ("moe_routed", "moe_shared"):
            routed = cmd.op == "moe_routed"
            fmt = ("mxfp4" if routed else "fp8") if moe.weights == "packed" else "bf16"
            slots, experts = (m * k, e) if routed else (m, 1)
            ids, rw = (v["ids"], v["weights"]) if routed else (None, None)
            topk = k if routed else 1
            h = _s(cmd, r, "h", slots * i * 2)
            hc, hs = _s(cmd, r, "hc", slots * i), _s(cmd, r, "hs", slots * i // 32)
            s13, s2 = (v["s13"], v["s2"]) if moe.weights == "packed" else (None, None)
            out.append(_linear(cmd, r, fmt, v["codes"], v["scales"], ids, rw, m, topk, 0, v["w13"], s13, experts, 2,
                               i, d, 1, h))
            out.append(_qdq(cmd, r, h, hc, hs, slots, i))
            out.append(_linear(cmd, r, fmt, hc, hs, ids, None, m, topk, 1, v["w2"], s2, experts, 1, d, i, 0,
                               v["slots" if routed else "y"]))
        elif cmd.op == "moe_combine":
            out.append(Launch(cmd.index, r, "moe_combine", (v["slots"], v["shared"], v["ids"], v["out"], Arg("u32", m),
                                                            Arg("u32", k), Arg("u32", d), Arg("u32", 1)),
                              _size(m * d), GROUP))
        elif cmd.op == "moe_combine_official":
            out.append(Launch(cmd.index, r, "moe_combine_official", (v["slots"], v["shared"], v["ids"], v["out"],
                                                                     Arg("u32", m), Arg("u32", k), Arg("u32", d)),
                              _size(m * d), GROUP))
        else:
            raise ValueError(f"not a MoE op: {cmd.op}")
    return out


__all__ = ["MOE_OPS", "moe_launches"]
