"""`shell replay --breakdown`: where the cycle's time goes, per command, per op kind and per phase.

A driver's session times one profiled epoch node by node (`Session.profile()`: a list of
(command index, node name, ms) in launch order); this module groups them. The cpu driver's times
are host numpy times (every rank's share of a command computed together); the cuda driver's come
from one epoch run as a graph with an event node after every kernel (drivers/cuda/profile.py).

For all-reduces the message size and bandwidths follow nccl-tests (doc/PERFORMANCE.md there):
size S = elements x bytes per element of one rank's buffer, algbw = S / t, and
busbw = algbw x 2(n-1)/n, the ring all-reduce's bus factor for n ranks.
"""

from __future__ import annotations

import statistics

from ..commands.program import Cycle
from ..errors import UsageError

#: Op kinds in the order the tables list them.
KINDS = ("all-reduce", "mHC pre", "mHC post/pre", "head", "Sinkhorn node", "other")
OP_KIND = {"allreduce": "all-reduce", "mhc_pre": "mHC pre", "mhc_post_pre": "mHC post/pre", "mhc_post_head": "head"}


def bus_factor(ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth factor 2(n-1)/n."""
    return 2.0 * (ranks - 1) / ranks if ranks > 0 else 0.0


def node_kind(cycle: Cycle, command: int | None, node: str) -> str:
    if "sinkhorn" in node.lower():
        return "Sinkhorn node"
    if command is None:
        return "other"
    return OP_KIND.get(cycle.commands[command].op, "other")


def stage_of(boundary) -> int:
    """The stage of a draft boundary (a verify boundary's layer); the phase's input reduction belongs
    to stage 0."""
    return max(boundary.layer, 0)


def command_kind(cycle: Cycle, command: int | None) -> str:
    """A node's kind by its command's op, whatever the op is (commands added later group without
    changes here); an all-reduce also names the dtype it sums."""
    if command is None:
        return "other"
    cmd = cycle.commands[command]
    if cmd.op == "allreduce":
        return f"allreduce {cycle.buffers[cmd.inputs['x']].dtype.name}"
    return cmd.op


def median_nodes(runs: list[list[tuple]]) -> list[tuple]:
    """Per-node medians of several profiled epochs of one session (same kernels in the same order)."""
    if not runs:
        raise UsageError("no profiled epochs to take medians of")
    first = [(c, n) for c, n, _ in runs[0]]
    for run in runs[1:]:
        if [(c, n) for c, n, _ in run] != first:
            raise UsageError("profiled epochs launched different kernels: no per-node medians")
    return [(c, n, statistics.median(float(run[i][2]) for run in runs)) for i, (c, n) in enumerate(first)]


def stage_table(cycle: Cycle, nodes: list[tuple], phase: str) -> dict:
    """One phase's node times (ms) per stage and per command kind within a stage, kinds in the order
    they first run; `total_ms` is the sum of the phase's nodes."""
    stages: dict[int, dict] = {}
    kinds: list[str] = []
    for command, _node, ms in nodes:
        if command is None or cycle.commands[command].boundary.phase != phase:
            continue
        kind = command_kind(cycle, command)
        if kind not in kinds:
            kinds.append(kind)
        st = stages.setdefault(stage_of(cycle.commands[command].boundary), {"kinds": {}, "total_ms": 0.0})
        k = st["kinds"].setdefault(kind, {"nodes": 0, "commands": set(), "ms": 0.0})
        k["nodes"] += 1
        k["commands"].add(command)
        k["ms"] += float(ms)
        st["total_ms"] += float(ms)
    for st in stages.values():
        for k in st["kinds"].values():
            k["commands"] = len(k["commands"])
    return {"phase": phase, "kinds": kinds, "stages": dict(sorted(stages.items())),
            "total_ms": sum(st["total_ms"] for st in stages.values())}


def build_breakdown(cycle: Cycle, nodes: list[tuple], how: str) -> dict:
    """Group a profiled epoch's nodes into per-command rows, per-kind and per-phase sums (ms)."""
    rows = []
    for command, node, ms in nodes:
        ms = float(ms)
        if ms < 0 or ms != ms:
            raise UsageError(f"profiled node {node!r} has no valid time ({ms})")
        kind = node_kind(cycle, command, node)
        cmd = cycle.commands[command] if command is not None else None
        row = {"command": command, "node": node, "kind": kind, "ms": ms,
               "phase": cmd.boundary.phase if cmd else "-", "boundary": cmd.boundary.name if cmd else node}
        if cmd is not None and cmd.op == "allreduce" and kind == "all-reduce":
            buf = cycle.buffers[cmd.inputs["x"]]
            row["bytes"] = buf.nbytes
        rows.append(row)
    # an all-reduce may run as several nodes (ring halves, segments): bandwidth over the command's sum
    ar_ms: dict[int, float] = {}
    for r in rows:
        if "bytes" in r:
            ar_ms[r["command"]] = ar_ms.get(r["command"], 0.0) + r["ms"]
    factor = bus_factor(cycle.ranks)
    collectives = []
    for idx, t in ar_ms.items():
        size = cycle.buffers[cycle.commands[idx].inputs["x"]].nbytes
        algbw = size / (t * 1e-3) / 1e9 if t > 0 else None
        collectives.append({"command": idx, "boundary": cycle.commands[idx].boundary.name, "bytes": size, "ms": t,
                            "algbw_GBps": algbw, "busbw_GBps": algbw * factor if algbw is not None else None})
    kinds = {k: {"nodes": 0, "ms": 0.0} for k in KINDS}
    phases: dict[str, dict[str, float]] = {}
    for r in rows:
        kinds[r["kind"]]["nodes"] += 1
        kinds[r["kind"]]["ms"] += r["ms"]
        ph = phases.setdefault(r["phase"], {})
        ph[r["kind"]] = ph.get(r["kind"], 0.0) + r["ms"]
    for ph in phases.values():
        ph["total"] = sum(ph.values())
    return {"how": how, "ranks": cycle.ranks, "bus_factor": factor, "nodes": rows, "collectives": collectives,
            "kinds": {k: v for k, v in kinds.items() if v["nodes"]}, "phases": phases,
            "total_ms": sum(r["ms"] for r in rows),
            "stages": {ph: stage_table(cycle, nodes, ph) for ph in dict.fromkeys(r["phase"] for r in rows if r["phase"] != "-")}}


def profile(session, cycle: Cycle) -> dict:
    """Run one profiled epoch on the session and group it; UsageError where the driver cannot."""
    prof = getattr(session, "profile", None)
    if prof is None:
        raise UsageError(f"{type(session).__name__} cannot time commands one by one; --breakdown runs on the "
                         "cpu driver and on the cuda driver with emulated ranks (--placement emulated)")
    nodes = prof()
    return build_breakdown(cycle, nodes, getattr(session, "profile_how", ""))
