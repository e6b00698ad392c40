"""Synthetic corpora: deterministic inputs and params, outputs from the contracts (a linked cycle).

Written into a staging folder under the target's lock and published whole (publish.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..commands.program import Buffer, Cycle, build_cycle, reference
from ..contracts.allreduce import RingContract
from ..contracts.numerics import F32
from ..geometry import Geometry
from .publish import staged
from .store import Corpus


def random_value(rng: np.random.Generator, buf: Buffer) -> np.ndarray:
    """A plausible value for an injected buffer: mHC params of realistic scale, or partial sums."""
    shape = buf.shape
    if buf.tensor == "fn":
        v = rng.standard_normal(shape, dtype=F32) / np.float32(np.sqrt(shape[1]))
    elif buf.tensor == "base":
        v = rng.standard_normal(shape, dtype=F32) * np.float32(0.5)
    elif buf.tensor == "scale":
        v = rng.uniform(0.25, 1.5, shape).astype(F32)
    else:
        v = rng.standard_normal(shape, dtype=F32)
    return v.astype(buf.dtype)


def injected_values(cyc: Cycle, seed, params_seed=None) -> list[dict[int, np.ndarray]]:
    """Values for every injected buffer on every rank. Params are replicated across ranks (and drawn
    from `params_seed` when given), inputs differ per rank; the same seed gives the same bits."""
    out: list[dict[int, np.ndarray]] = [{} for _ in range(cyc.ranks)]
    for buf in cyc.injected():
        if buf.kind == "param":
            s = seed if params_seed is None else params_seed
            v = random_value(np.random.default_rng([*_seq(s), 1 << 20, buf.id]), buf)
            for r in range(cyc.ranks):
                out[r][buf.id] = v
        else:
            for r in range(cyc.ranks):
                out[r][buf.id] = random_value(np.random.default_rng([*_seq(seed), r, buf.id]), buf)
    return out


def changed_inputs(cyc: Cycle, seed: int, epoch: int) -> list[dict[int, np.ndarray]]:
    """New values for the input (non-param) buffers of a changed epoch."""
    out: list[dict[int, np.ndarray]] = [{} for _ in range(cyc.ranks)]
    for buf in cyc.injected():
        if buf.kind == "input":
            for r in range(cyc.ranks):
                out[r][buf.id] = random_value(np.random.default_rng([seed, 7919, epoch, r, buf.id]), buf)
    return out


def _seq(seed) -> list[int]:
    return list(seed) if isinstance(seed, (tuple, list)) else [int(seed)]


def synth(g: Geometry, out: Path, seed: int = 0, contract: RingContract = RingContract(),
          progress=None, replace: bool = False) -> Corpus:
    """Write the synthetic corpus of `g` to `out` (an empty or new folder, or any with `replace`)."""
    cyc = build_cycle(g, contract)
    with staged(out, replace) as folder:
        values = reference(cyc, injected_values(cyc, seed))
        corpus = Corpus.create(folder, g, {"kind": "synth", "seed": seed}, contract, how="synth")
        for cmd in cyc.commands:
            for r in range(g.ranks):
                corpus.write(cmd.boundary, r, {n: values[r][b] for n, b in cyc.tensor_buffers(cmd).items()})
            if progress:
                progress(cmd)
        corpus.info.parity = {"how": "synth", "ops": {}}
        corpus.finalize()
    return Corpus.open(out)
