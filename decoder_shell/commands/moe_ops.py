"""The MoE commands of a draft FFN sub-block: their tensors, links and contracts (docs/MOE.md).

Chain (per rank, rank-local weight shards, fused combine; docs/CONTRACTS.md section 10):
  moe_qdq      x bf16 [M, D] (the hc_pre output y)   -> codes u8 [M, D], scales u8 [M, D/32]
  moe_gate     x bf16 [M, D], weight bf16 [E, D], bias f32 [E] -> ids i32 [M, k], weights f32 [M, k]
  moe_routed   codes, scales, ids, weights, the rank's expert slices -> slots f32 [M, k, D]
  moe_shared   codes, scales, the rank's shared-expert slice          -> y f32 [M, D]
  moe_combine  slots, shared y, ids -> out f32 [M, D] (slots in ascending expert id, then shared)
then the sub-block's all-reduce (fp32) and the mHC boundary, which reads the fp32 sum (fused mode).
Exact-official mode (geometry MoeShape.combine, MOE_CHAINS): instead of moe_combine, two fp32
all-reduces (slots [M, k, D], shared y [M, D]) and then
  moe_combine_official  summed slots, summed shared, ids -> out bf16 [M, D]: +0.0, bf16(slot) added in
                        ascending expert id in fp32, then bf16(shared), rounded to bf16 (the official MoE)
which the mHC boundary reads (bf16).
Weights: packed (MXFP4 routed / FP8 shared codes and E8M0 scales) or expanded (bf16, decoded once).
"""

from __future__ import annotations

import numpy as np

from ..contracts.act_qdq import QAct, act_qdq
from ..contracts.expert import expert
from ..contracts.moe import ExpertWeights, combine_slots, official_epilogue, routed_slots
from ..contracts.moe_gate import moe_gate
from ..contracts.qlinear import QWeight
from ..geometry import MOE_OPS, Boundary, Geometry

ROUTED_PARAMS = {"packed": ("w13", "s13", "w2", "s2"), "expanded": ("w13", "w2")}


def is_moe(op: str) -> bool:
    return op in MOE_OPS


def tensors(b: Boundary, g: Geometry, spec) -> list:
    """TensorSpecs of a MoE boundary (spec: the TensorSpec class of commands.ops)."""
    m = g.phase(b.phase).rows
    d, moe = g.hidden, g.moe
    e, k, i = moe.experts, moe.top_k, moe.width // g.ranks
    codes = spec("codes", "input", "uint8", (m, d))
    scales = spec("scales", "input", "uint8", (m, d // 32))
    if b.op == "moe_qdq":
        return [spec("x", "input", "bfloat16", (m, d)), spec("codes", "output", "uint8", (m, d)),
                spec("scales", "output", "uint8", (m, d // 32))]
    if b.op == "moe_gate":
        return [spec("x", "input", "bfloat16", (m, d)), spec("weight", "param", "bfloat16", (e, d)),
                spec("bias", "param", "float32", (e,)), spec("ids", "output", "int32", (m, k)),
                spec("weights", "output", "float32", (m, k))]
    if b.op == "moe_routed":
        if moe.weights == "packed":
            w = [spec("w13", "param", "uint8", (e, 2, i, d // 2)), spec("s13", "param", "uint8", (e, 2, i, d // 32)),
                 spec("w2", "param", "uint8", (e, d, i // 2)), spec("s2", "param", "uint8", (e, d, i // 32))]
        else:
            w = [spec("w13", "param", "bfloat16", (e, 2, i, d)), spec("w2", "param", "bfloat16", (e, d, i))]
        return [codes, scales, spec("ids", "input", "int32", (m, k)), spec("weights", "input", "float32", (m, k)),
                *w, spec("slots", "output", "float32", (m, k, d))]
    if b.op == "moe_shared":
        if moe.weights == "packed":
            w = [spec("w13", "param", "uint8", (2, i, d)), spec("s13", "param", "uint8", (2, i // 32, d // 32)),
                 spec("w2", "param", "uint8", (d, i)), spec("s2", "param", "uint8", (d // 32, i // 32))]
        else:
            w = [spec("w13", "param", "bfloat16", (2, i, d)), spec("w2", "param", "bfloat16", (d, i))]
        return [codes, scales, *w, spec("y", "output", "float32", (m, d))]
    if b.op == "moe_combine":
        return [spec("slots", "input", "float32", (m, k, d)), spec("shared", "input", "float32", (m, d)),
                spec("ids", "input", "int32", (m, k)), spec("out", "output", "float32", (m, d))]
    if b.op == "moe_combine_official":
        return [spec("slots", "input", "float32", (m, k, d)), spec("shared", "input", "float32", (m, d)),
                spec("ids", "input", "int32", (m, k)), spec("out", "output", "bfloat16", (m, d))]
    raise ValueError(f"unknown MoE op {b.op!r}")


def links(b: Boundary, bounds: list[Boundary]) -> dict[str, tuple[int, str]]:
    """Inputs produced earlier in the phase: the hc_pre output feeds qdq and gate; each later
    command reads the commands before it in the same sub-block."""
    before = {x.op: x.index for x in bounds[:b.index] if x.layer == b.layer and x.sub_block == b.sub_block}
    if b.op in ("moe_qdq", "moe_gate"):
        mhc = max(x.index for x in bounds[:b.index] if x.op.startswith("mhc"))
        return {"x": (mhc, "y")}
    q = {"codes": (before["moe_qdq"], "codes"), "scales": (before["moe_qdq"], "scales")}
    if b.op == "moe_routed":
        return {**q, "ids": (before["moe_gate"], "ids"), "weights": (before["moe_gate"], "weights")}
    if b.op == "moe_shared":
        return q
    if b.op == "moe_combine_official":
        slots_ar, shared_ar = [x.index for x in bounds[:b.index]
                               if x.op == "allreduce" and x.layer == b.layer and x.sub_block == b.sub_block]
        return {"slots": (slots_ar, "out"), "shared": (shared_ar, "out"), "ids": (before["moe_gate"], "ids")}
    return {"slots": (before["moe_routed"], "slots"), "shared": (before["moe_shared"], "y"),
            "ids": (before["moe_gate"], "ids")}


def official_reduce(b: Boundary, bounds: list[Boundary]) -> str | None:
    """For an all-reduce of an exact-official MoE sub-block, the partial it sums: "slots" (the
    moe_routed slots) or "shared" (the moe_shared y); None for every other all-reduce."""
    if b.op != "allreduce" or b.index < 2:
        return None
    prev = bounds[b.index - 1].op
    if prev == "moe_shared":
        return "slots"
    if prev == "allreduce" and bounds[b.index - 2].op == "moe_shared":
        return "shared"
    return None


def reduce_links(b: Boundary, bounds: list[Boundary]) -> dict[str, tuple[int, str]]:
    """The input of a MoE sub-block's all-reduce: the combine output (fused mode) or the partial it
    sums (exact-official mode); {} for an all-reduce outside a MoE sub-block."""
    if b.index and bounds[b.index - 1].op == "moe_combine":
        return {"x": (b.index - 1, "out")}
    which = official_reduce(b, bounds)
    if which is None:
        return {}
    producer = "moe_routed" if which == "slots" else "moe_shared"
    idx = max(x.index for x in bounds[:b.index] if x.op == producer)
    return {"x": (idx, "slots" if which == "slots" else "y")}


def reduce_shape(b: Boundary, g: Geometry) -> tuple | None:
    """The fp32 shape an exact-official MoE all-reduce carries, None for other all-reduces."""
    if g.moe is None or g.moe.combine != "official" or not g.phase(b.phase).moe or b.sub_block != "ffn":
        return None
    which = official_reduce(b, g.phase(b.phase).boundaries())
    if which is None:
        return None
    m = g.phase(b.phase).rows
    return (m, g.moe.top_k, g.hidden) if which == "slots" else (m, g.hidden)


def routed_weights(t: dict, weights: str) -> list[ExpertWeights]:
    """Per-expert weights of a moe_routed command's params (views, no copies)."""
    if weights == "expanded":
        return [ExpertWeights(t["w13"][e, 0], t["w13"][e, 1], t["w2"][e]) for e in range(t["w13"].shape[0])]
    return [ExpertWeights(QWeight("mxfp4", t["w13"][e, 0], t["s13"][e, 0]),
                          QWeight("mxfp4", t["w13"][e, 1], t["s13"][e, 1]),
                          QWeight("mxfp4", t["w2"][e], t["s2"][e])) for e in range(t["w13"].shape[0])]


def shared_weights(t: dict, weights: str) -> ExpertWeights:
    if weights == "expanded":
        return ExpertWeights(t["w13"][0], t["w13"][1], t["w2"])
    return ExpertWeights(QWeight("fp8", t["w13"][0], t["s13"][0]), QWeight("fp8", t["w13"][1], t["s13"][1]),
                         QWeight("fp8", t["w2"], t["s2"]))


def run(op: str, t: dict[str, np.ndarray], g: Geometry) -> dict[str, np.ndarray]:
    """One MoE command's contract on one rank's named tensors."""
    if op == "moe_qdq":
        q = act_qdq(t["x"])
        return {"codes": q.codes, "scales": q.scales}
    if op == "moe_gate":
        ids, w = moe_gate(t["x"], t["weight"], t["bias"], g.moe.top_k)
        return {"ids": ids, "weights": w}
    if op == "moe_routed":
        xq = QAct(np.asarray(t["codes"]), np.asarray(t["scales"]))
        return {"slots": routed_slots(xq, t["ids"], t["weights"], routed_weights(t, g.moe.weights))}
    if op == "moe_shared":
        xq = QAct(np.asarray(t["codes"]), np.asarray(t["scales"]))
        sh = shared_weights(t, g.moe.weights)
        return {"y": expert(xq, sh.w1, sh.w3, sh.w2, None, "float32")}
    if op == "moe_combine":
        return {"out": combine_slots(t["slots"], t["ids"], t["shared"])}
    if op == "moe_combine_official":
        return {"out": official_epilogue(t["slots"], t["shared"], t["ids"])}
    raise ValueError(f"unknown MoE op {op!r}")
