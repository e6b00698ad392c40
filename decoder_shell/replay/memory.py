"""The memory table of a corpus: what one rank's session holds on its device, part by part.

Weights come from the corpus's manifests (each (rank, boundary) manifest names its params with dtype
and shape), grouped into parts by the op that reads them (routed experts, shared expert, router, mHC
and norms; any other op's params under its own op name, so commands added later appear without
changes here), and per draft stage (the boundary's layer). Expert weights also get their bf16 size
decoded once (`moe-expanded`, drivers/cuda/arenas.expanded_bytes). Activations and scratch come from
the cuda driver's own arena layout (drivers/cuda/arenas.Arenas, built without a device): the same
numbers the session allocates. Without a corpus, the geometry alone gives the same table (the
manifests of a corpus follow commands/ops.op_tensors exactly); a test checks both against seed
section 5's shapes.
"""

from __future__ import annotations

from ..commands.program import Cycle, build_cycle
from ..contracts.allreduce import RingContract
from ..drivers.cuda.arenas import Arenas, expanded_bytes
from .breakdown import stage_of

#: Part names of the ops whose params a rank holds; any other op's params are listed under the op.
PARTS = {"moe_routed": "routed experts", "moe_shared": "shared expert", "moe_gate": "router (gate)",
         "mhc_pre": "mHC / norms", "mhc_pre_streams": "mHC / norms", "mhc_post_pre": "mHC / norms",
         "mhc_post_head": "mHC / norms"}
#: The cuda driver's arenas a session allocates per rank (before any gate candidate's staging / expanded ones).
ARENAS = ("outputs", "state (params + injected inputs)", "work (scratch, sync, decode tables)")
#: Ops whose weights the `moe-expanded` form decodes to bf16 on the device.
EXPANDABLE = ("moe_routed", "moe_shared")


def part_of(op: str) -> str:
    return PARTS.get(op, f"{op} params")


def param_entries_from_corpus(corpus):
    """(rank, boundary, tensor name, bytes) of every param the corpus's manifests name."""
    for m in corpus.manifests():
        for t in m.tensors:
            if t.role == "param":
                yield m.rank, m.boundary, t.name, t.nbytes


def param_entries_from_cycle(cycle: Cycle):
    """The same list from the geometry alone (every rank holds params of the same shapes)."""
    for cmd in cycle.commands:
        for name, bid in cmd.inputs.items():
            buf = cycle.buffers[bid]
            if buf.kind == "param":
                for r in range(cycle.ranks):
                    yield r, cmd.boundary, name, buf.nbytes


def memory_table(geometry, entries=None, contract: RingContract | None = None) -> dict:
    """Per rank: weight parts (bytes as stored, bf16 bytes where the expert form decodes them, per
    phase and stage), activations and the driver's scratch and totals. `entries` defaults to the
    geometry's own param list (param_entries_from_cycle)."""
    cycle = build_cycle(geometry, contract or RingContract())
    entries = list(param_entries_from_cycle(cycle) if entries is None else entries)
    by_boundary = {c.boundary.name: c for c in cycle.commands}
    try:
        sizes = dict(zip(ARENAS, Arenas(None, cycle, {})._sizes[:3]))
    except KeyError as e:  # an op the cuda driver has no kernel (and so no scratch layout) for
        sizes, no_layout = {}, f"the cuda driver does not run {e.args[0]!r}: no arena layout"
    else:
        no_layout = None
    activations = sum(b.nbytes for b in cycle.buffers if b.kind != "param")
    ranks = []
    for r in range(cycle.ranks):
        parts: dict[str, dict] = {}
        for rank, b, name, nbytes in entries:
            if rank != r:
                continue
            p = parts.setdefault(part_of(b.op), {"part": part_of(b.op), "ops": [], "bytes": 0, "expanded_bytes": 0,
                                                 "stages": {}})
            if b.op not in p["ops"]:
                p["ops"].append(b.op)
            p["bytes"] += nbytes
            key = f"{b.phase} {stage_of(b)}"
            p["stages"][key] = p["stages"].get(key, 0) + nbytes
            p["expanded_bytes"] += _expanded(cycle, by_boundary[b.name], name, nbytes)
        weights = sum(p["bytes"] for p in parts.values())
        ranks.append({
            "rank": r, "parts": list(parts.values()), "weights_bytes": weights,
            "weights_expanded_bytes": sum(p["expanded_bytes"] for p in parts.values()),
            "activations_bytes": activations,
            "arenas": sizes, "session_bytes": sum(sizes.values()) if sizes else None,
            "expanded_arena_bytes": sum(sum(expanded_bytes(cycle, c).values()) for c in cycle.commands
                                        if c.op in EXPANDABLE and cycle.geometry.moe.weights == "packed"),
        })
    note = "bytes per rank; a session with emulated ranks holds every rank's arenas on one device"
    return {"geometry": geometry.to_json(), "ranks": ranks, "note": f"{note}; {no_layout}" if no_layout else note}


def _expanded(cycle: Cycle, cmd, name: str, nbytes: int) -> int:
    """bf16 bytes of a param once decoded (`moe-expanded`): packed expert codes decode to bf16, their
    scales vanish into the values; everything else (and an expanded corpus) stays as it is."""
    if cmd.op not in EXPANDABLE or cycle.geometry.moe.weights != "packed":
        return nbytes
    if name.startswith("s"):
        return 0
    return expanded_bytes(cycle, cmd)[name]


def corpus_memory(corpus) -> dict:
    """The memory table of a corpus, from its manifests."""
    return memory_table(corpus.geometry, param_entries_from_corpus(corpus), corpus.info.contract())
