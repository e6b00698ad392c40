"""Synthetic corpora: deterministic inputs and params, outputs from the contracts (a linked cycle).

Written into a staging folder under the target's lock and published whole (publish.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..commands.program import Buffer, Cycle, build_cycle, reference
from ..commands.values import random_value
from ..contracts.allreduce import RingContract
from ..commands.dense_ops import REPLICATED
from ..geometry import DENSE_OPS, MOE_OPS, Geometry
from . import recipe as rc
from .publish import staged
from .store import Corpus

#: Synthetic MoE weights: E8M0 scale bytes per format (decoded weights of a plausible size, far inside
#: the linear's exact domain) and the gate weight's std.
MOE_SCALES = {"mxfp4": (118, 121), "fp8": (112, 114)}
#: Tensors from this size up are stored as recipes, not blobs (corpus/recipe.py).
RECIPE_MIN_BYTES = 1 << 20


def moe_recipe(buf: Buffer, seed, rank: int) -> dict | None:
    """The recipe of a MoE command's weight on one rank (each rank holds its own slice), else None.
    Expanded weights are the packed ones of the same seed decoded once, so a packed and an
    expanded corpus of one seed carry the same weight values."""
    if buf.boundary.op not in (*MOE_OPS, *DENSE_OPS) or buf.kind != "param":
        return None
    s = [*_seq(seed), 1 << 21, buf.boundary.index, rank]
    if buf.boundary.op in REPLICATED:
        s = s[:-1]  # every rank holds the whole weight
    if buf.boundary.op == "moe_gate":  # replicated on every rank (all ranks route alike)
        if buf.tensor == "weight":
            return {"kind": "bf16-normal", "seed": s[:-1], "std": float(1 / np.sqrt(buf.shape[1]))}
        return None  # the fp32 bias: random_value
    fmt = "mxfp4" if buf.boundary.op == "moe_routed" else "fp8"
    lo, hi = MOE_SCALES[fmt]
    which = int(buf.tensor[1:] or 0)  # 13 or 2: w13 pairs with s13, w2 with s2 (dense: w with s)
    codes = {"kind": "e2m1-bytes" if fmt == "mxfp4" else "e4m3-codes", "seed": [*s, 1, which]}
    scales = {"kind": "e8m0-bytes", "seed": [*s, 2, which], "lo": lo, "hi": hi}
    if buf.dtype.kind == "u":
        return codes if buf.tensor[0] == "w" else scales
    shape = buf.shape  # expanded bf16: [..., N, K]
    lead, (n, k) = shape[:-2], shape[-2:]
    cshape = (*lead, n, k // 2) if fmt == "mxfp4" else (*lead, n, k)
    sshape = (*lead, n, k // 32) if fmt == "mxfp4" else (*lead, n // 32, k // 32)
    return {"kind": "expand", "format": fmt, "codes": codes, "scales": scales,
            "codes_shape": list(cshape), "scales_shape": list(sshape)}


def injected_values(cyc: Cycle, seed, params_seed=None) -> list[dict[int, np.ndarray]]:
    """Values for every injected buffer on every rank. Params are replicated across ranks (and drawn
    from `params_seed` when given), inputs differ per rank; the same seed gives the same bits."""
    out: list[dict[int, np.ndarray]] = [{} for _ in range(cyc.ranks)]
    for buf in cyc.injected():
        if buf.kind == "param" and moe_recipe(buf, 0, 0) is not None:
            s = seed if params_seed is None else params_seed
            for r in range(cyc.ranks):
                out[r][buf.id] = rc.generate(moe_recipe(buf, s, r), buf.dtype, buf.shape)
        elif buf.kind == "param":
            s = seed if params_seed is None else params_seed
            v = random_value(np.random.default_rng([*_seq(s), 1 << 20, buf.id]), buf)
            for r in range(cyc.ranks):
                out[r][buf.id] = v
        else:
            for r in range(cyc.ranks):
                out[r][buf.id] = random_value(np.random.default_rng([*_seq(seed), r, buf.id]), buf)
    return out


def _seq(seed) -> list[int]:
    return list(seed) if isinstance(seed, (tuple, list)) else [int(seed)]


def synth(g: Geometry, out: Path, seed: int = 0, contract: RingContract = RingContract(),
          progress=None, recipe_min_bytes: int = RECIPE_MIN_BYTES, replace: bool = False,
          injected: list[dict[int, np.ndarray]] | None = None) -> Corpus:
    """Write the synthetic corpus of `g` to `out` (an empty or new folder, or any with `replace`),
    staged beside it and published whole (publish.py). `injected` (per rank, buffer id -> value, for
    every injected buffer) replaces the generated values, e.g. weights chosen so that two contracts
    must agree; its tensors are stored as blobs (a recipe describes only generated values)."""
    cyc = build_cycle(g, contract)
    if injected is not None:
        recipe_min_bytes = 1 << 62
    with staged(out, replace) as folder:
        values = reference(cyc, injected if injected is not None else injected_values(cyc, seed))
        corpus = Corpus.create(folder, g, {"kind": "synth", "seed": seed}, contract, how="synth")
        for cmd in cyc.commands:
            for r in range(g.ranks):
                recipes = {}
                for name, bid in cmd.inputs.items():
                    buf = cyc.buffers[bid]
                    if buf.boundary == cmd.boundary and buf.nbytes >= recipe_min_bytes:
                        rec = moe_recipe(buf, seed, r)
                        if rec is not None:
                            recipes[name] = rec
                corpus.write(cmd.boundary, r, {n: values[r][b] for n, b in cyc.tensor_buffers(cmd).items()},
                             recipes=recipes)
            if progress:
                progress(cmd)
        corpus.info.parity = {"how": "synth", "ops": {}}
        corpus.finalize()
    return Corpus.open(out)
