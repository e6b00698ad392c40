"""Geometry: the fixed shape of a cycle, and the ordered boundaries of each phase (DESIGN.md 2-3).

A phase with S sub-blocks has this boundary list (index order is execution order):
  0            allreduce      the embedding (or draft input projection) partial sums
  1            mhc_pre        embedding copied into HC streams, hc_pre of sub-block 0
  2s+2         allreduce      output of sub-block s (s = 0 .. S-1)
  2s+3         mhc_post_pre   hc_post of sub-block s, hc_pre of sub-block s+1 (s < S-1)
  2S+1         mhc_post_head  hc_post of the last sub-block, then the head collapse
so a phase has S+1 reductions and S-1 post/pre boundaries (dsv4-flash verify: 87 and 85).
A MoE draft's FFN sub-block puts its MoE commands before its all-reduce (MOE_CHAINS): the fused combine
mode keeps one all-reduce per sub-block; the exact-official mode all-reduces the per-slot and the shared
partials (two all-reduces) and ends in the `moe_combine_official` epilogue that the mHC boundary reads.

vLLM's DeepSeek-V4 differs in two places, both part of the geometry: its hc_pre fuses the next
sub-block's RMSNorm (`fused_norm`: the layer input is RMSNorm(collapse) * norm_weight), and its MTP
draft (`draft_kind="vllm-mtp"`) starts from streams it builds itself (h_proj + e_proj, no broadcast of
the reduced embedding), so boundary 1 of that draft phase is `mhc_pre_streams`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from .contracts.mhc import MhcParams
from .errors import UsageError

REDUCE_DTYPES = ("bfloat16", "float32")
#: Bounds that keep every tensor a corpus can declare far below what a host can allocate.
MAX_HIDDEN, MAX_LAYERS, MAX_ROWS, MAX_RANKS = 65536, 1024, 1024, 64
DRAFT_KINDS = {"mtp1": 1, "dspark": 3, "vllm-mtp": 1}  # draft kind -> stages (each stage: attention + MoE)
#: Draft kinds whose first mHC boundary takes streams the draft built (not the broadcast embedding).
STREAM_DRAFTS = ("vllm-mtp",)
#: Every MoE draft command (commands/moe_ops.py).
MOE_OPS = ("moe_qdq", "moe_gate", "moe_routed", "moe_shared", "moe_combine", "moe_combine_official")
MOE_WEIGHTS = ("packed", "expanded")
#: The commands an attention sub-block of a draft phase with `attn` runs before its all-reduce
#: (commands/dense_ops.py): the dense FP8 projections around the injected attention core `o`.
ATTN_OPS = ("attn_qdq", "attn_wq_a", "attn_wkv", "attn_q_qdq", "attn_wq_b", "attn_o_qdq", "attn_wo_a",
            "attn_oa_qdq", "attn_wo_b")
#: Stage 0's main_proj on the cat of the three taps (before its attention commands).
MAIN_OPS = ("main_qdq", "main_proj")
DENSE_OPS = (*MAIN_OPS, *ATTN_OPS)
#: The dense commands that are projections (a quantized linear), not act_qdq.
DENSE_PROJECTIONS = ("main_proj", "attn_wq_a", "attn_wkv", "attn_wq_b", "attn_wo_a", "attn_wo_b")
#: Combine modes (seed section 3): "official" all-reduces the fp32 per-slot and shared partials and then
#: rounds each to bf16 and adds them in ascending expert id (the model's own arithmetic); "fused" sums
#: the slots per rank in fp32, one fp32 all-reduce, and the mHC reads the fp32 sum.
MOE_COMBINES = ("official", "fused")
#: The boundaries of a MoE FFN sub-block up to the mHC boundary that reads its output, per combine mode.
MOE_CHAINS = {
    "fused": ("moe_qdq", "moe_gate", "moe_routed", "moe_shared", "moe_combine", "allreduce"),
    "official": ("moe_qdq", "moe_gate", "moe_routed", "moe_shared", "allreduce", "allreduce",
                 "moe_combine_official"),
}


@dataclass(frozen=True)
class MoeShape:
    """The draft's quantized MoE: routed experts (MXFP4), one shared expert (FP8 32x32 blocks), top-k
    routing; `width` is the whole expert width, split evenly over the TP ranks (seed section 3)."""

    experts: int = 128
    top_k: int = 3
    width: int = 2304
    weights: str = "packed"  # "packed" (official codes + scales) | "expanded" (decoded once to bf16)
    combine: str = "fused"  # MOE_COMBINES; a geometry without the field (older corpora) is fused

    def check(self, hidden: int, ranks: int) -> None:
        checks = [
            (1 <= self.experts <= 1024, "MoE experts must be between 1 and 1024"),
            (1 <= self.top_k <= min(self.experts, 16), "MoE top-k must be between 1 and min(experts, 16)"),
            (hidden % 32 == 0, "a MoE draft needs a hidden size on the 32-grid"),
            (self.width > 0 and self.width % (32 * ranks) == 0,
             f"MoE expert width {self.width} must split into 32-groups over {ranks} ranks"),
            (self.weights in MOE_WEIGHTS, f"MoE weights must be one of {MOE_WEIGHTS}"),
            (self.combine in MOE_COMBINES, f"MoE combine mode must be one of {MOE_COMBINES}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise UsageError(msg)


@dataclass(frozen=True)
class AttnShape:
    """The draft attention's dense projections (seed section 3, TP split of heads and wo_a groups):
    wq_a [q_lora, D] and wkv [kv, D] replicated; wq_b [heads*head_dim, q_lora] split by heads;
    wo_a `o_groups` x [o_rank, heads*head_dim/o_groups] split by groups; wo_b [D, o_groups*o_rank]
    split by inputs (fp32 partial); main_proj [D, taps*D] replicated (stage 0)."""

    q_lora: int = 1280
    kv: int = 512
    heads: int = 64
    head_dim: int = 512
    o_groups: int = 8
    o_rank: int = 1024
    taps: int = 3

    def check(self, hidden: int, ranks: int) -> None:
        width = self.heads * self.head_dim
        checks = [
            (all(isinstance(v, int) and v > 0 for v in (self.q_lora, self.kv, self.heads, self.head_dim,
                                                          self.o_groups, self.o_rank, self.taps)),
             "attention shape fields must be positive integers"),
            (hidden % 32 == 0 and self.q_lora % 32 == 0 and self.kv % 32 == 0 and self.o_rank % 32 == 0,
             "attention widths (hidden, q_lora, kv, o_rank) must be on the 32-grid"),
            (self.heads % ranks == 0 and self.o_groups % ranks == 0,
             f"attention heads and wo_a groups must split evenly over {ranks} ranks"),
            (width % (32 * self.o_groups) == 0, "each wo_a group's input width must be on the 32-grid"),
            (width * self.o_rank <= 1 << 31, "attention shape too large"),
        ]
        for ok, msg in checks:
            if not ok:
                raise UsageError(msg)


@dataclass(frozen=True)
class Boundary:
    phase: str
    index: int
    op: str
    layer: int  # -1 for the embedding reduction
    sub_block: str  # "embed" | "attn" | "ffn" | "head"

    @property
    def name(self) -> str:
        return f"{self.phase}.{self.index:04d}.{self.op}"

    def is_collective(self) -> bool:
        return self.op == "allreduce"


@dataclass(frozen=True)
class Phase:
    name: str
    rows: int
    sub_blocks: int
    first: str = "mhc_pre"  # or "mhc_pre_streams" (vLLM's MTP draft)
    moe: bool = False  # FFN sub-blocks run the MoE commands of MOE_CHAINS[combine]
    combine: str = "fused"
    attn: bool = False  # attention sub-blocks run the ATTN_OPS commands (stage 0 MAIN_OPS first)

    def boundaries(self) -> list[Boundary]:
        out = [Boundary(self.name, 0, "allreduce", -1, "embed"),
               Boundary(self.name, 1, self.first, 0, "attn")]
        for s in range(self.sub_blocks):
            layer, sb = divmod(s, 2)
            kind = ("attn", "ffn")[sb]
            if self.attn and kind == "attn":
                base = len(out)
                chain = (*MAIN_OPS, *ATTN_OPS) if layer == 0 else ATTN_OPS
                out.extend(Boundary(self.name, base + i, op, layer, kind) for i, op in enumerate(chain))
            chain = MOE_CHAINS[self.combine] if self.moe and kind == "ffn" else ("allreduce",)
            base = len(out)
            out.extend(Boundary(self.name, base + i, op, layer, kind) for i, op in enumerate(chain))
            last = s == self.sub_blocks - 1
            out.append(Boundary(self.name, len(out), "mhc_post_head" if last else "mhc_post_pre",
                                layer, "head" if last else kind))
        return out


@dataclass(frozen=True)
class Geometry:
    preset: str
    hidden: int
    layers: int
    ranks: int
    verify_rows: int
    draft_rows: int
    draft_kind: str = "mtp1"
    hc: int = 4
    reduce_dtype: str = "bfloat16"
    mhc: MhcParams = field(default_factory=MhcParams)
    fused_norm: bool = False  # hc_pre's y is RMSNorm(collapse) * norm_weight (vLLM)
    moe: MoeShape | None = None  # set: the draft phase's FFN sub-blocks are real MoE commands
    attn: AttnShape | None = None  # set (with moe): its attention sub-blocks' dense projections too

    def __post_init__(self):
        for name in ("hidden", "layers", "ranks", "verify_rows", "draft_rows", "hc"):
            if not isinstance(getattr(self, name), int) or isinstance(getattr(self, name), bool):
                raise UsageError(f"geometry field {name!r} must be an integer")
        if not isinstance(self.fused_norm, bool):
            raise UsageError("geometry field 'fused_norm' must be true or false")
        checks = [
            (1 <= self.hidden <= MAX_HIDDEN, f"hidden size must be between 1 and {MAX_HIDDEN}"),
            (1 <= self.layers <= MAX_LAYERS, f"layers must be between 1 and {MAX_LAYERS}"),
            (1 <= self.ranks <= MAX_RANKS, f"--tp must be between 1 and {MAX_RANKS}"),
            (1 <= self.verify_rows <= MAX_ROWS, f"--verify-rows must be between 1 and {MAX_ROWS}"),
            (0 <= self.draft_rows <= MAX_ROWS, f"--draft-rows must be between 0 (no draft phase) and {MAX_ROWS}"),
            (self.draft_kind in DRAFT_KINDS, f"draft kind must be one of {sorted(DRAFT_KINDS)}"),
            (self.hc == 4, "hc_mult is 4 for DeepSeek-V4"),
            (self.reduce_dtype in REDUCE_DTYPES, f"reduction dtype must be one of {REDUCE_DTYPES}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise UsageError(msg)
        if self.moe is not None:
            self.moe.check(self.hidden, self.ranks)
        if self.attn is not None:
            if self.moe is None:
                raise UsageError("attention commands belong to a MoE draft (set moe too)")
            self.attn.check(self.hidden, self.ranks)

    @property
    def phases(self) -> list[Phase]:
        out = []
        if self.draft_rows:
            first = "mhc_pre_streams" if self.draft_kind in STREAM_DRAFTS else "mhc_pre"
            moe = self.moe is not None
            out.append(Phase("draft", self.draft_rows, 2 * DRAFT_KINDS[self.draft_kind], first, moe,
                             self.moe.combine if moe else "fused", self.attn is not None))
        out.append(Phase("verify", self.verify_rows, 2 * self.layers))
        return out

    def phase(self, name: str) -> Phase:
        for p in self.phases:
            if p.name == name:
                return p
        raise UsageError(f"geometry has no phase {name!r}")

    def boundaries(self) -> list[Boundary]:
        return [b for p in self.phases for b in p.boundaries()]

    def to_json(self) -> dict:
        d = asdict(self)
        if not self.fused_norm:  # corpora written before the field existed keep their exact geometry JSON
            del d["fused_norm"]
        if d["moe"] is None:
            del d["moe"]  # geometries without a MoE draft serialize as before
        elif d["moe"]["combine"] == "fused":
            del d["moe"]["combine"]  # fused MoE corpora written before the field keep their geometry JSON
        if d["attn"] is None:
            del d["attn"]  # geometries without attention commands serialize as before
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Geometry":
        d = dict(d)
        d["mhc"] = MhcParams(**d.get("mhc", {}))
        if d.get("moe") is not None:
            d["moe"] = MoeShape(**d["moe"])
        if d.get("attn") is not None:
            d["attn"] = AttnShape(**d["attn"])
        return cls(**d)


PRESETS = {
    "tiny": dict(hidden=64, layers=2),
    "dsv4-flash": dict(hidden=4096, layers=43),
    "dsv4-pro": dict(hidden=7168, layers=61),
    # MoE drafts (docs/MOE.md): the draft phase's FFN sub-blocks are real quantized MoE commands.
    # Both combine the MoE in the model's own arithmetic (exact-official) unless --moe-combine fused.
    "tiny-moe": dict(hidden=64, layers=1, moe=MoeShape(experts=8, top_k=3, width=128, combine="official")),
    # DeepSeek-V4.1-Flash-1017 DSpark draft (hidden 5120, 128 routed experts, top-3, width 2304); the
    # verify phase is a one-layer skeleton: this preset measures the draft.
    "dsv41-draft": dict(hidden=5120, layers=1, moe=MoeShape(experts=128, top_k=3, width=2304, combine="official")),
    # The same drafts with their attention sub-blocks' dense projections as commands (docs/MOE.md); the
    # attention core stays an injected input.
    "tiny-moe-attn": dict(hidden=64, layers=1, moe=MoeShape(experts=8, top_k=3, width=128, combine="official"),
                          attn=AttnShape(q_lora=64, kv=32, heads=4, head_dim=32, o_groups=4, o_rank=32)),
    "dsv41-draft-attn": dict(hidden=5120, layers=1,
                             moe=MoeShape(experts=128, top_k=3, width=2304, combine="official"), attn=AttnShape()),
}


def preset(name: str, *, tp: int = 2, verify_rows: int = 2, draft_rows: int = 1,
           draft_kind: str = "mtp1", reduce_dtype: str = "bfloat16", moe_weights: str | None = None,
           fused_norm: bool = False, moe_combine: str | None = None) -> Geometry:
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    shape = dict(PRESETS[name])
    if moe_weights is not None:
        if shape.get("moe") is None:
            raise UsageError(f"--moe-weights applies to the MoE presets, not {name!r}")
        shape["moe"] = replace(shape["moe"], weights=moe_weights)
    if moe_combine is not None:
        if shape.get("moe") is None:
            raise UsageError(f"--moe-combine applies to the MoE presets, not {name!r}")
        shape["moe"] = replace(shape["moe"], combine=moe_combine)
    return Geometry(preset=name, ranks=tp, verify_rows=verify_rows, draft_rows=draft_rows,
                    draft_kind=draft_kind, reduce_dtype=reduce_dtype, fused_norm=fused_norm, **shape)
