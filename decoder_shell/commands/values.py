"""New values for a cycle's injected buffers: plausible mHC params and partial sums, and the fresh
inputs of a changed epoch. They belong to the cycle (buffers and their shapes), not to a corpus, so
the engine and the gate draw a changed epoch's inputs here without going through the corpus room;
the synthetic corpus (corpus/synth.py) draws its inputs and params from the same `random_value`."""

from __future__ import annotations

import numpy as np

from ..contracts.numerics import F32
from .program import Buffer, Cycle


def random_value(rng: np.random.Generator, buf: Buffer) -> np.ndarray:
    """A plausible value for an injected buffer: mHC params of realistic scale, or partial sums."""
    shape = buf.shape
    if buf.tensor == "fn":
        v = rng.standard_normal(shape, dtype=F32) / np.float32(np.sqrt(shape[1]))
    elif buf.tensor == "base":
        v = rng.standard_normal(shape, dtype=F32) * np.float32(0.5)
    elif buf.tensor == "norm_weight":
        v = np.float32(1.0) + rng.standard_normal(shape, dtype=F32) * np.float32(0.1)
    elif buf.tensor == "scale":
        v = rng.uniform(0.25, 1.5, shape).astype(F32)
    else:
        v = rng.standard_normal(shape, dtype=F32)
    return v.astype(buf.dtype)


def changed_inputs(cyc: Cycle, seed: int, epoch: int) -> list[dict[int, np.ndarray]]:
    """New values for the input (non-param) buffers of a changed epoch."""
    out: list[dict[int, np.ndarray]] = [{} for _ in range(cyc.ranks)]
    for buf in cyc.injected():
        if buf.kind == "input":
            for r in range(cyc.ranks):
                out[r][buf.id] = random_value(np.random.default_rng([seed, 7919, epoch, r, buf.id]), buf)
    return out
