"""The ops a cycle is made of: their tensors (role, dtype, shape) and their numpy contracts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..contracts import mhc
from ..contracts.allreduce import RingContract, allreduce
from ..contracts.mhc import MhcParams
from ..geometry import Boundary, Geometry
from . import dense_ops, moe_ops


@dataclass(frozen=True)
class TensorSpec:
    name: str
    role: str  # "input" | "param" | "output"
    dtype: str
    shape: tuple


#: The ops whose hc_pre builds the next sub-block's input (and, with fused_norm, normalizes it).
PRE_MIX = ("mhc_pre", "mhc_pre_streams", "mhc_post_pre")


def op_tensors(b: Boundary, g: Geometry) -> list[TensorSpec]:
    """The tensors a boundary records, in a fixed order."""
    m = g.phase(b.phase).rows
    d, hc, rd = g.hidden, g.hc, g.reduce_dtype
    if moe_ops.is_moe(b.op):
        return moe_ops.tensors(b, g, TensorSpec)
    if dense_ops.is_dense(b.op):
        return dense_ops.tensors(b, g, TensorSpec)
    if g.phase(b.phase).moe and b.sub_block in ("ffn", "head") and b.layer >= 0:
        # fused: a MoE sub-block reduces its fp32 combine output and the mHC reads the fp32 sum;
        # exact-official: the mHC reads the bf16 output of moe_combine_official
        rd = "bfloat16" if g.moe.combine == "official" else "float32"
    if g.phase(b.phase).attn and b.sub_block == "attn" and b.op in ("allreduce", "mhc_post_pre") and b.layer >= 0:
        rd = "float32"  # an attention sub-block with commands: wo_b's fp32 partial; the mHC reads the fp32 sum
    if b.op == "allreduce":
        shape = moe_ops.reduce_shape(b, g)
        if shape is not None:  # an exact-official MoE all-reduce: fp32 slot or shared partials
            return [TensorSpec("x", "input", "float32", shape), TensorSpec("out", "output", "float32", shape)]
        return [TensorSpec("x", "input", rd, (m, d)), TensorSpec("out", "output", rd, (m, d))]
    n_mix = hc if b.op == "mhc_post_head" else (2 + hc) * hc
    params = [TensorSpec("fn", "param", "float32", (n_mix, hc * d)),
              TensorSpec("base", "param", "float32", (n_mix,)),
              TensorSpec("scale", "param", "float32", (1 if b.op == "mhc_post_head" else 3,))]
    streams = TensorSpec("streams", "output", "bfloat16", (m, hc, d))
    y = TensorSpec("y", "output", "bfloat16", (m, d))
    pc = [TensorSpec("next_post", "output", "float32", (m, hc)),
          TensorSpec("next_comb", "output", "float32", (m, hc, hc))]
    if g.fused_norm and b.op in PRE_MIX:
        params.append(TensorSpec("norm_weight", "param", "float32", (d,)))
    if b.op == "mhc_pre":
        return [TensorSpec("x", "input", rd, (m, d)), *params, streams, y, *pc]
    if b.op == "mhc_pre_streams":
        return [TensorSpec("streams", "input", "bfloat16", (m, hc, d)), *params, y, *pc]
    carried = [TensorSpec("x", "input", rd, (m, d)),
               TensorSpec("residual", "input", "bfloat16", (m, hc, d)),
               TensorSpec("post", "input", "float32", (m, hc)),
               TensorSpec("comb", "input", "float32", (m, hc, hc))]
    if b.op == "mhc_post_pre":
        return [*carried, *params, streams, y, *pc]
    if b.op == "mhc_post_head":
        return [*carried, *params, streams, y]
    raise ValueError(f"unknown op {b.op!r}")


def links(b: Boundary, phase_boundaries: list[Boundary]) -> dict[str, tuple[int, str]]:
    """Inputs of `b` produced by an earlier boundary of the same phase: name -> (index, output name)."""
    if moe_ops.is_moe(b.op):
        return moe_ops.links(b, phase_boundaries)
    if dense_ops.is_dense(b.op):
        return dense_ops.links(b, phase_boundaries)
    if b.op == "allreduce":
        if b.index and phase_boundaries[b.index - 1].op == "attn_wo_b":
            return {"x": (b.index - 1, "y")}
        return moe_ops.reduce_links(b, phase_boundaries)
    prev_reduce = b.index - 1
    if b.op == "mhc_pre":
        return {"x": (prev_reduce, "out")}
    if b.op == "mhc_pre_streams":
        return {}
    prev_mhc = max(x.index for x in phase_boundaries[:b.index] if x.op.startswith("mhc"))
    return {"x": (prev_reduce, "out"), "residual": (prev_mhc, "streams"),
            "post": (prev_mhc, "next_post"), "comb": (prev_mhc, "next_comb")}


def run_mhc(op: str, t: dict[str, np.ndarray], p: MhcParams, hc: int = 4, exp=None) -> dict[str, np.ndarray]:
    """Run one mHC op's contract on named tensors; returns its named outputs. `exp` replaces the
    contract's portable exp (the cpu driver's deliberately inexact `numpy-exp` variant)."""
    e = {"exp": exp} if exp is not None else {}
    w = t.get("norm_weight")
    if op == "mhc_pre":
        return _next(mhc.mhc_pre(t["x"], t["fn"], t["base"], t["scale"], hc, p, norm_weight=w, **e))
    if op == "mhc_pre_streams":
        out = _next(mhc.mhc_pre_streams(t["streams"], t["fn"], t["base"], t["scale"], p, norm_weight=w, **e))
        del out["streams"]  # an input of this op, not an output
        return out
    if op == "mhc_post_pre":
        return _next(mhc.mhc_post_pre(t["x"], t["residual"], t["post"], t["comb"], t["fn"], t["base"], t["scale"], p,
                                      norm_weight=w, **e))
    if op == "mhc_post_head":
        return mhc.mhc_post_head(t["x"], t["residual"], t["post"], t["comb"], t["fn"], t["base"], t["scale"], p, **e)
    raise ValueError(f"unknown mHC op {op!r}")


def run_local(op: str, t: dict[str, np.ndarray], g: Geometry) -> dict[str, np.ndarray]:
    """Run one rank-local op (mHC, MoE or dense) on named tensors; returns its named outputs."""
    if moe_ops.is_moe(op):
        return moe_ops.run(op, t, g)
    if dense_ops.is_dense(op):
        return dense_ops.run(op, t, g)
    return run_mhc(op, t, g.mhc, g.hc)


def _next(out: dict) -> dict:
    """The post/comb an hc_pre computes are consumed by the next hc_post: name them so."""
    return {"streams": out["streams"], "y": out["y"], "next_post": out["post"], "next_comb": out["comb"]}


def run_allreduce(xs: list[np.ndarray], contract: RingContract) -> np.ndarray:
    return allreduce(xs, contract)
