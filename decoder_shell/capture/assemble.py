"""Turn one phase's recorded events into the geometry's boundaries (geometry.py order, ops.py tensors).

Where the service hands its mHC step the sub-block output (`x` of the event, vLLM does), it is checked
to be the preceding all-reduce's output bit for bit; a fused hc_pre's RMSNorm weight (`norm_weight`)
goes with its pre-mix params. A phase with S sub-blocks runs, in order: the embedding all-reduce C0, the first hyper-connection H0,
then for each sub-block s its all-reduce C(s+1) followed by the next hyper-connection H(s+1), the last
one being the head collapse E. The boundaries are cut from those events:

  allreduce 0        x, out            = C0
  mhc_pre 1          x = C0.out; streams, y, next_post, next_comb = H0; params of H0
  allreduce 2s+2     x, out            = C(s+1)
  mhc_post_pre 2s+3  x = C(s+1).out; residual, post, comb = H(s); streams, y, next_* = H(s+1)
  mhc_post_head 2S+1 x = C(S).out; residual, post, comb = H(S-1); streams, y = E; params of E

so the cycle is linked by construction: a consumer names the very bytes its producer recorded.
"""

from __future__ import annotations

import numpy as np

from ..commands.ops import op_tensors
from ..contracts.numerics import BF16, F32
from ..contracts.numerics import dtype_of
from ..geometry import Boundary, Geometry, Phase
from .errors import CaptureError
from .recorder import Event

_LETTER = {"collective": "C", "hc": "H", "head": "E"}


def expected_kinds(phase: Phase) -> list[str]:
    s = phase.sub_blocks
    return ["collective", "hc"] + ["collective", "hc"] * (s - 1) + ["collective", "head"]


def assemble(g: Geometry, phase: Phase, events: list[Event]) -> list[tuple[Boundary, dict]]:
    """The phase's boundaries with their named tensors, validated against the geometry."""
    want = expected_kinds(phase)
    got = [e.kind for e in events]
    _check_norm(g, phase, events)
    if got != want:
        raise CaptureError(f"{phase.name} phase: geometry ({g.layers} layers, {phase.sub_blocks} sub-blocks) "
                           f"expects {_count(want)} in the order {_seq(want)}, the service ran "
                           f"{_count(got)} ({_seq(got)}); is the service running this geometry?")
    c = [e.tensors for e in events if e.kind == "collective"]
    h = [e.tensors for e in events if e.kind == "hc"]
    head = events[-1].tensors
    out = []
    for b in phase.boundaries():
        if b.op == "allreduce":
            t = c[0] if b.index == 0 else c[(b.index - 2) // 2 + 1]
            tensors = {"x": t["x"], "out": t["out"]}
        elif b.op == "mhc_pre":
            _same_x(b, h[0], c[0])
            tensors = {"x": c[0]["out"], **_pre_mix(h[0])}
        elif b.op == "mhc_pre_streams":
            tensors = _pre_mix(h[0])
        else:
            s = (b.index - 3) // 2
            _same_x(b, h[s + 1] if b.op == "mhc_post_pre" else head, c[s + 1])
            carried = {"x": c[s + 1]["out"], "residual": h[s]["streams"], "post": h[s]["post"],
                       "comb": h[s]["comb"]}
            if b.op == "mhc_post_pre":
                tensors = {**carried, **_pre_mix(h[s + 1])}
            else:
                tensors = {**carried, "fn": head["fn"], "base": head["base"], "scale": head["scale"],
                           "streams": head["streams"], "y": head["y"]}
        out.append((b, _conform(g, b, tensors)))
    return out


def _pre_mix(h: dict) -> dict:
    out = {"fn": h["fn"], "base": h["base"], "scale": h["scale"], "streams": h["streams"], "y": h["y"],
           "next_post": h["post"], "next_comb": h["comb"]}
    if "norm_weight" in h:
        out["norm_weight"] = h["norm_weight"]
    return out


def _same_x(b: Boundary, mhc_step: dict, collective: dict) -> None:
    """Where the service handed its mHC step the sub-block output, it must be the all-reduce's output."""
    x = mhc_step.get("x")
    if x is not None and (x.shape != collective["out"].shape or x.tobytes() != collective["out"].tobytes()):
        raise CaptureError(f"{b.name}: the mHC step consumed a sub-block output that is not the preceding "
                           "all-reduce's output (another op runs between them, or a reduction was missed)")


def _check_norm(g: Geometry, phase: Phase, events: list[Event]) -> None:
    normed = {"norm_weight" in e.tensors for e in events if e.kind == "hc"}
    if g.fused_norm and False in normed:
        raise CaptureError(f"{phase.name} phase: the geometry has fused_norm but the service's hc_pre applied no "
                           "RMSNorm weight; capture without fused_norm")
    if not g.fused_norm and True in normed:
        raise CaptureError(f"{phase.name} phase: the service fuses RMSNorm into hc_pre (vLLM); capture with a "
                           "fused_norm geometry (--fused-norm)")


def _conform(g: Geometry, b: Boundary, tensors: dict) -> dict:
    """Check every tensor against ops.py's spec; fp32 params held in bf16 are widened (exact)."""
    out = {}
    for spec in op_tensors(b, g):
        a = np.asarray(tensors[spec.name])
        want = dtype_of(spec.dtype)
        if a.dtype == BF16 and want == F32 and spec.role == "param":
            a = a.astype(F32)
        if a.dtype != want or tuple(a.shape) != spec.shape:
            raise CaptureError(f"{b.name}: captured {spec.name} is {a.dtype}{list(a.shape)}, geometry expects "
                               f"{spec.dtype}{list(spec.shape)}; is the service running this geometry?")
        out[spec.name] = np.ascontiguousarray(a)
    return out


def _count(kinds: list[str]) -> str:
    n = {k: kinds.count(k) for k in ("collective", "hc", "head")}
    return f"{n['collective']} all-reduces, {n['hc']} hyper-connections, {n['head']} head"


def _seq(kinds: list[str]) -> str:
    s = "".join(_LETTER[k] for k in kinds)
    return s if len(s) <= 40 else s[:37] + "..."
