"""The cuda driver's implementations of a command (gate candidates) as typed values, and their checks.

A variant says what node a command becomes (the replay's own kernel, nothing, a copy, an empty
kernel), which command kind it can stand for, and the few knobs the kernel builder and the graph
read (rows per block, a folded all-reduce, clusters, FMA, all-reduce mode and segments). Everything
that asks "which variant is this" reads these fields; no name is ever sliced.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ...contracts.numerics import LANES
from ...errors import UsageError
from ...geometry import DENSE_OPS, DENSE_PROJECTIONS, MOE_OPS

#: The MoE commands that run experts (w1/w3 -> act_qdq(h) -> w2): the ones a weight format applies to.
EXPERT_OPS = ("moe_routed", "moe_shared")
from . import args as A


class Node(Enum):
    OWN = "own"  # the driver's own kernel(s) for the command
    NONE = "none"  # no node (deletion bound)
    COPY = "copy"  # a copy of the expected outputs (deletion bound)
    EMPTY = "empty"  # an empty kernel (launch floor)


class Target(Enum):
    ANY = "any"
    MHC = "mhc"
    ALLREDUCE = "allreduce"
    MOE = "moe"


@dataclass(frozen=True)
class Variant:
    name: str
    doc: str
    target: Target = Target.ANY
    node: Node = Node.OWN
    rows: int = 0  # fused-mN: all N rows in one block (the phase must have M=N)
    fused: bool = False  # the preceding all-reduce folded into this mHC kernel
    cluster: bool = False  # mHC on 8-block thread-block clusters (sm_90+)
    cluster_pre: bool = False  # the baseline's cluster finish of pre where the device has clusters
    sinkhorn_inline: bool = False
    fma: bool = False
    ring: bool = False  # all-reduce as reduce-scatter + all-gather nodes
    segments: int = 1  # all-reduce run as this many narrower collectives
    emulated_only: bool = False  # reads peers outside the arrival protocol
    ops: tuple = ()  # Target.MOE: the MoE commands it can stand for
    expanded: bool = False  # MoE experts: packed weights decoded once on the device to bf16
    linear: str = ""  # MoE experts: the expert linear kernel (drivers/cuda/moe.LINEAR_KERNELS); "" the default
    gate: str = ""  # MoE gate: the gate kernel (drivers/cuda/moe.GATE_KERNELS); "" the default

    @property
    def builds_kernel(self) -> bool:
        """Whether this variant needs an mHC kernel of its own (for an mHC command)."""
        return self.node is Node.OWN


_ALL = [
    Variant("baseline", "the replay's own kernels: one-shot all-reduce node + mHC node (one row per block; on sm_90+ "
            "its 8-block clusters finish pre through distributed shared memory) + Sinkhorn node beside the next "
            "all-reduce", cluster_pre=True),
    Variant("grid-barrier", "the mHC kernel without clusters: pre's tree after one grid-wide arrival on a 64-bit "
            "counter, mixes and post in block 0", Target.MHC),
    Variant("sinkhorn-inline", "the baseline mHC kernel computing the Sinkhorn comb itself (no separate node)",
            Target.MHC, sinkhorn_inline=True),
    Variant("delete", "no node at all (deletion-only upper bound; outputs stay poisoned)", node=Node.NONE),
    Variant("copy", "a copy of the command's expected outputs instead of the command (deletion-only bound)",
            node=Node.COPY),
    *[Variant(f"fused-m{m}", f"fixed-width mHC kernel, all {m} rows in one block (phase must have M={m})",
              Target.MHC, rows=m) for m in (2, 4, 8)],
    Variant("fused-allreduce-mhc", "the preceding all-reduce folded into this mHC kernel (one node per rank and "
            "boundary)", Target.MHC, fused=True, emulated_only=True),
    Variant("cluster", "mHC kernel on 8-block thread-block clusters, one per row, reducing through distributed "
            "shared memory (sm_90+, D a multiple of 1024)", Target.MHC, cluster=True),
    Variant("cluster-fused", "cluster mHC kernel with the preceding all-reduce folded in (one node per rank and "
            "boundary)", Target.MHC, fused=True, cluster=True, emulated_only=True),
    Variant("fma", "mHC kernel built with FMA contraction (deliberately inexact)", Target.MHC, fma=True),
    Variant("empty", "an empty kernel node in the command's place (the launch floor)", node=Node.EMPTY),
    Variant("oneshot", "all-reduce: every rank reads all peers in the contract's order (baseline)", Target.ALLREDUCE),
    Variant("ring", "all-reduce as reduce-scatter + all-gather nodes (the ring's structure, same order)",
            Target.ALLREDUCE, ring=True, emulated_only=True),
    Variant("segmented-2", "all-reduce run as 2 narrower collectives (changes bits unless the contract is segmented "
            "so)", Target.ALLREDUCE, segments=2),
    Variant("segmented-4", "all-reduce run as 4 narrower collectives", Target.ALLREDUCE, segments=4),
    Variant("moe-expanded", "MoE expert commands and dense projections on bf16 weights decoded once on the device "
            "from the corpus's packed codes and scales (untimed): expanded vs packed on one corpus (select: experts, "
            "projections)", Target.MOE, ops=(*EXPERT_OPS, *DENSE_PROJECTIONS), expanded=True),
    Variant("moe-spread", "MoE expert commands on the spread linear kernels (moe_routed.cu: group sums spread over "
            "the block, table-free weight decode; same bits) (select: experts)", Target.MOE, ops=EXPERT_OPS,
            linear="spread"),
    Variant("moe-warp", "MoE expert commands on the warp-per-row linear kernels (moe.cu; same bits) "
            "(select: experts)", Target.MOE, ops=EXPERT_OPS, linear="warp"),
    Variant("moe-gate-split", "the MoE gate on a block per (row, 4 experts), the row's last block routing it "
            "(moe_gate_split_g4; same bits) (select: moe_gate)", Target.MOE, ops=("moe_gate",), gate="split"),
    Variant("moe-gate-row", "the MoE gate on one block per row (moe_gate; same bits) (select: moe_gate)",
            Target.MOE, ops=("moe_gate",), gate="row"),
    Variant("fused", "the fused MoE combine in place of the exact-official chain (select: combine): per rank the "
            "slots summed in fp32 with the shared partial, one fp32 all-reduce, one bf16 rounding; a different "
            "contract, whose mismatches the gate reports", Target.MOE, ops=("moe_combine_official",)),
]
VARIANTS: dict[str, Variant] = {v.name: v for v in _ALL}
BASELINE = VARIANTS["baseline"]
#: The variants an all-reduce command accepts (derived from the targets above, never listed by hand).
ALLREDUCE_VARIANTS = tuple(n for n, v in VARIANTS.items() if v.target in (Target.ANY, Target.ALLREDUCE))
MAX_PIECES = max(v.segments for v in _ALL)  # all-reduce launches per collective: one arrival slot set each


def describe() -> dict[str, str]:
    return {n: v.doc for n, v in VARIANTS.items()}


def resolve(cycle, variants: dict | None, *, rank: int | None, sm: int) -> dict:
    """Command index -> Variant or user kernel candidate, every choice checked against the cycle."""
    if cycle.ranks > A.MAXR:
        raise UsageError(f"the cuda driver emulates at most {A.MAXR} ranks on one device (--tp {cycle.ranks})")
    cmds = cycle.commands
    out: dict = {}
    for idx, v in ((int(k), v) for k, v in (variants or {}).items()):
        if not isinstance(v, str):
            _check_user(cycle, idx, v)
            out[idx] = v
            continue
        if v not in VARIANTS:
            raise UsageError(f"cuda driver has no implementation {v!r} (see `shell gate --list-candidates`)")
        var = VARIANTS[v]
        if rank is not None and var.emulated_only:
            raise UsageError(f"{v!r} reads peers outside the arrival protocol: emulated ranks only "
                             f"(--placement emulated)")
        if not 0 <= idx < len(cmds):
            raise UsageError(f"no command {idx} in this cycle")
        op = cmds[idx].op
        if op == "allreduce" and v not in ALLREDUCE_VARIANTS:
            raise UsageError(f"{v!r} is an mHC implementation; command {idx} is an all-reduce")
        if op != "allreduce" and var.target is Target.ALLREDUCE:
            raise UsageError(f"{v!r} is an all-reduce implementation; command {idx} is {op}")
        if (op in MOE_OPS or op in DENSE_OPS) and var.target is Target.MHC:
            raise UsageError(f"{v!r} is an mHC implementation; command {idx} is {op}")
        if var.target is Target.MOE and op not in var.ops:
            raise UsageError(f"{v!r} applies to {', '.join(var.ops)}; command {idx} is {op}")
        if var.expanded and cycle.geometry.moe.weights != "packed":
            raise UsageError(f"{v!r} decodes packed experts; this corpus already holds them expanded")
        if var.rows:
            rows = cycle.geometry.phase(cmds[idx].boundary.phase).rows
            if rows != var.rows:
                raise UsageError(f"{v} needs M={var.rows}; {cmds[idx].boundary.name} has M={rows}")
        out[idx] = var
    for idx, var in out.items():
        if isinstance(var, Variant) and var.fused:
            prev = out.get(idx - 1, BASELINE)
            if idx == 0 or cmds[idx - 1].op != "allreduce" or not isinstance(prev, Variant) \
                    or prev.name not in ("baseline", "oneshot"):
                raise UsageError(f"{var.name} needs a plain all-reduce right before {cmds[idx].boundary.name}")
        if isinstance(var, Variant) and var.cluster:
            d = cycle.geometry.hidden
            if d % LANES or d // LANES > 8:
                raise UsageError(f"{var.name} needs a hidden size that is a multiple of {LANES} (at most "
                                 f"{8 * LANES}); D={d}")
            if sm < 90:
                raise UsageError(f"{var.name} needs thread-block clusters (sm_90 or newer); this device is sm_{sm}")
    return out


def _check_user(cycle, idx: int, cand) -> None:
    """A user kernel (replay.candidates.KernelCandidate): CUDA C source, cubin, fatbin or PTX."""
    if not 0 <= idx < len(cycle.commands):
        raise UsageError(f"no command {idx} in this cycle")
    ok = {"source": ("cuda",), "binary": ("cubin", "fatbin", "ptx")}
    if getattr(cand, "language", None) not in ok.get(getattr(cand, "kind", None), ()):
        raise UsageError(f"{cand}: the cuda driver runs CUDA C sources and cubin/fatbin/PTX binaries, "
                         f"not {getattr(cand, 'kind', '?')} {getattr(cand, 'language', '?')}")
