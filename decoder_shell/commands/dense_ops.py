"""The dense commands of a draft attention sub-block: their tensors, links and contracts (docs/MOE.md).

Chain (per rank, rank-local shards of seed section 3; the attention core is one injected input `o`):
  main_qdq     taps bf16 [M, 3D] (injected; stage 0 only)      -> codes, scales
  main_proj    main_proj [D, 3D] (replicated)                  -> main_x bf16 [M, D]
  attn_qdq     x bf16 [M, D] (the hc_pre output y)              -> codes, scales
  attn_wq_a    wq_a [q_lora, D] (replicated)                   -> y bf16 [M, q_lora]
  attn_wkv     wkv [kv, D] (replicated)                        -> y bf16 [M, kv]
  attn_q_qdq   wq_a's y                                         -> codes, scales
  attn_wq_b    wq_b [heads/R * head_dim, q_lora] (heads split) -> y bf16
  attn_o_qdq   o bf16 [M, heads/R * head_dim] (injected core output) -> codes, scales
  attn_wo_a    wo_a [o_groups/R, o_rank, head_dim*heads/o_groups] (groups split) -> y bf16 [M, o_groups/R * o_rank]
  attn_oa_qdq  wo_a's y                                         -> codes, scales
  attn_wo_b    wo_b [D, o_groups/R * o_rank] (inputs split)    -> y f32 [M, D] (the rank's partial)
then the sub-block's fp32 all-reduce and the mHC boundary. Every linear is contracts.dense (one group,
wo_a: o_groups/R groups). Weights: packed (FP8 codes `w` [G, N, K] and 32x32 E8M0 scales `s`
[G, N/32, K/32]) or expanded (bf16 `w`, decoded once), as the MoE weights of the geometry.
The outputs nothing reads while the core is injected (main_x, wkv's and wq_b's) are cycle outputs still.
"""

from __future__ import annotations

import numpy as np

from ..contracts.act_qdq import QAct, act_qdq
from ..contracts.dense import dense, dense_weights
from ..geometry import DENSE_OPS, DENSE_PROJECTIONS, Boundary, Geometry

#: qdq op -> the op whose output y it quantizes (None: the sub-block's hc_pre y, or an injected input).
QDQ_SOURCE = {"main_qdq": None, "attn_qdq": "mhc", "attn_q_qdq": "attn_wq_a", "attn_o_qdq": None,
              "attn_oa_qdq": "attn_wo_a"}
#: projection -> the qdq op it reads.
LINEAR_SOURCE = dict(zip(DENSE_PROJECTIONS, ("main_qdq", "attn_qdq", "attn_qdq", "attn_q_qdq", "attn_o_qdq",
                                             "attn_oa_qdq")))
#: Linear ops whose weight every rank holds whole (the others hold their TP shard).
REPLICATED = ("main_proj", "attn_wq_a", "attn_wkv")


def is_dense(op: str) -> bool:
    return op in DENSE_OPS


def is_qdq(op: str) -> bool:
    return op in QDQ_SOURCE


def linear_shape(op: str, g: Geometry) -> tuple[int, int, int, str]:
    """(groups, N, K per group, output dtype) of a linear op, rank-local."""
    a, d, r = g.attn, g.hidden, g.ranks
    width = a.heads // r * a.head_dim  # o and wq_b's output per rank
    return {"main_proj": (1, d, a.taps * d, "bfloat16"),
            "attn_wq_a": (1, a.q_lora, d, "bfloat16"),
            "attn_wkv": (1, a.kv, d, "bfloat16"),
            "attn_wq_b": (1, width, a.q_lora, "bfloat16"),
            "attn_wo_a": (a.o_groups // r, a.o_rank, a.heads * a.head_dim // a.o_groups, "bfloat16"),
            "attn_wo_b": (1, d, a.o_groups // r * a.o_rank, "float32")}[op]


def qdq_width(op: str, g: Geometry) -> int:
    if op == "main_qdq":
        return g.attn.taps * g.hidden
    if op == "attn_qdq":
        return g.hidden
    src = {"attn_q_qdq": "attn_wq_a", "attn_o_qdq": "attn_wq_b", "attn_oa_qdq": "attn_wo_a"}[op]
    groups, n, _, _ = linear_shape(src, g)
    return groups * n


def tensors(b: Boundary, g: Geometry, spec) -> list:
    """TensorSpecs of a dense boundary (spec: the TensorSpec class of commands.ops)."""
    m = g.phase(b.phase).rows
    if is_qdq(b.op):
        k = qdq_width(b.op, g)
        return [spec("x", "input", "bfloat16", (m, k)), spec("codes", "output", "uint8", (m, k)),
                spec("scales", "output", "uint8", (m, k // 32))]
    groups, n, k, out = linear_shape(b.op, g)
    if g.moe.weights == "packed":
        w = [spec("w", "param", "uint8", (groups, n, k)), spec("s", "param", "uint8", (groups, n // 32, k // 32))]
    else:
        w = [spec("w", "param", "bfloat16", (groups, n, k))]
    return [spec("codes", "input", "uint8", (m, groups * k)), spec("scales", "input", "uint8", (m, groups * k // 32)),
            *w, spec("y", "output", out, (m, groups * n))]


def links(b: Boundary, bounds: list[Boundary]) -> dict[str, tuple[int, str]]:
    """Inputs produced earlier in the same sub-block (the hc_pre y for attn_qdq)."""
    before = {x.op: x.index for x in bounds[:b.index] if x.layer == b.layer and x.sub_block == b.sub_block}
    if is_qdq(b.op):
        src = QDQ_SOURCE[b.op]
        if src == "mhc":
            return {"x": (max(x.index for x in bounds[:b.index] if x.op.startswith("mhc")), "y")}
        return {"x": (before[src], "y")} if src else {}
    src = before[LINEAR_SOURCE[b.op]]
    return {"codes": (src, "codes"), "scales": (src, "scales")}


def run(op: str, t: dict[str, np.ndarray], g: Geometry) -> dict[str, np.ndarray]:
    """One dense command's contract on one rank's named tensors."""
    if is_qdq(op):
        q = act_qdq(t["x"])
        return {"codes": q.codes, "scales": q.scales}
    _, _, _, out = linear_shape(op, g)
    a = QAct(np.asarray(t["codes"]), np.asarray(t["scales"]))
    return {"y": dense(a, dense_weights(t["w"], t.get("s")), out)}
