"""Recipes: tensors a corpus carries as the recorded way to generate them instead of as blobs.

A full-size MoE draft holds gigabytes of synthetic expert weights per rank; a manifest entry may
name a recipe (a small JSON object) next to the digest of the bytes it generates. Reading such a
tensor regenerates it and checks the blake3 digest, so the corpus stays small on disk and exact:
a recipe that no longer reproduces its bytes (another numpy bit generator, an edited manifest) is
an error naming the file, never silently different data.

Kinds (numpy's PCG64 seeded with `seed`, a list of non-negative integers):
  e2m1-bytes   uniform bytes 0..255 (two E2M1 nibbles each; every byte is valid)
  e4m3-codes   uniform over the 254 non-NaN E4M3 bytes (0x7F and 0xFF skipped)
  e8m0-bytes   uniform bytes in [lo, hi] (never 255)
  bf16-normal  N(0, std^2) drawn in fp32, rounded to bf16
  expand       a packed weight (`format` mxfp4 or fp8, `codes` and `scales` recipes with their
               shapes) decoded once to bf16 (contracts.qlinear.expand, matrix by matrix)
"""

from __future__ import annotations

import numpy as np

from ..contracts.numerics import BF16, F32
from ..contracts.qlinear import QWeight, expand
from ..errors import CorpusError

KINDS = ("e2m1-bytes", "e4m3-codes", "e8m0-bytes", "bf16-normal", "expand")
MAX_RECIPE_CHARS = 4096


def _rng(r: dict) -> np.random.Generator:
    seed = r.get("seed")
    if not isinstance(seed, list) or not seed or not all(isinstance(s, int) and s >= 0 for s in seed):
        raise ValueError("seed must be a non-empty list of non-negative integers")
    return np.random.default_rng(seed)


def generate(r: dict, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """The tensor a recipe describes (ValueError for a malformed recipe)."""
    if not isinstance(r, dict) or r.get("kind") not in KINDS:
        raise ValueError(f"unknown recipe kind {r.get('kind') if isinstance(r, dict) else r!r}")
    kind = r["kind"]
    shape = tuple(shape)
    if kind == "expand":
        return _expand(r, shape)
    rng = _rng(r)
    if kind == "e2m1-bytes":
        out = rng.integers(0, 256, shape, dtype=np.uint8)
    elif kind == "e4m3-codes":
        u = rng.integers(0, 254, shape, dtype=np.uint8)
        out = (u + (u >= 0x7F)).astype(np.uint8)  # skips 0x7F; 0xFF is out of reach
    elif kind == "e8m0-bytes":
        lo, hi = int(r["lo"]), int(r["hi"])
        if not 0 <= lo <= hi <= 254:
            raise ValueError("e8m0-bytes needs 0 <= lo <= hi <= 254")
        out = rng.integers(lo, hi + 1, shape, dtype=np.uint8)
    else:
        out = (rng.standard_normal(shape, dtype=F32) * np.float32(r["std"])).astype(BF16)
    if out.dtype != np.dtype(dtype):
        raise ValueError(f"recipe {kind} makes {out.dtype}, the tensor is {np.dtype(dtype)}")
    return out


def _expand(r: dict, shape: tuple) -> np.ndarray:
    fmt = r.get("format")
    if fmt not in ("mxfp4", "fp8"):
        raise ValueError("expand needs format mxfp4 or fp8")
    cshape, sshape = tuple(r["codes_shape"]), tuple(r["scales_shape"])
    codes = generate(r["codes"], np.uint8, cshape)
    scales = generate(r["scales"], np.uint8, sshape)
    lead = cshape[:-2]
    if sshape[:-2] != lead or shape[:-2] != lead:
        raise ValueError("expand: codes, scales and tensor disagree on their leading axes")
    c2, s2 = codes.reshape((-1,) + cshape[-2:]), scales.reshape((-1,) + sshape[-2:])
    out = np.stack([expand(QWeight(fmt, c, s)) for c, s in zip(c2, s2)]) if c2.shape[0] else np.zeros(shape, BF16)
    if out.reshape(shape).shape != shape:
        raise ValueError("expand: the decoded weight has another shape than the tensor")
    return out.reshape(shape)


def load(r, dtype: np.dtype, shape: tuple, digest: str, where: str) -> bytes:
    """Regenerate a recipe's bytes and check them against the manifest's digest."""
    from .blobs import digest_of

    try:
        data = np.ascontiguousarray(generate(r, dtype, shape)).tobytes()
    except (ValueError, KeyError, TypeError) as e:
        raise CorpusError(f"{where}: malformed recipe ({e})") from None
    if digest_of(data) != digest:
        raise CorpusError(f"{where}: the bytes its recipe generates do not match its digest")
    return data
