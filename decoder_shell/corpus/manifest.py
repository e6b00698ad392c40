"""Manifests: one JSON file per (rank, boundary) naming every tensor's role, dtype, shape and blob."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..commands.ops import TensorSpec, op_tensors
from ..contracts.numerics import DTYPES, dtype_of  # noqa: F401  (manifests name dtypes this way)
from ..errors import CorpusError
from ..geometry import Boundary, Geometry
from .files import parse_json, read_regular
from .schema import MANIFEST, check

SCHEMA = 1
MAX_MANIFEST_BYTES = 1 << 20


@dataclass(frozen=True)
class TensorEntry:
    name: str
    role: str
    dtype: str
    shape: tuple
    digest: str
    recipe: dict | None = None  # set: generated from this recipe, not stored as a blob (corpus/recipe.py)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * DTYPES[self.dtype].itemsize

    def to_json(self) -> dict:
        d = {"name": self.name, "role": self.role, "dtype": self.dtype, "shape": list(self.shape),
             "digest": self.digest}
        if self.recipe is not None:
            d["recipe"] = self.recipe
        return d


@dataclass(frozen=True)
class Manifest:
    boundary: Boundary
    rank: int
    tensors: tuple[TensorEntry, ...]
    attrs: dict

    def tensor(self, name: str) -> TensorEntry:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def to_json(self) -> dict:
        b = self.boundary
        return {"schema": SCHEMA, "phase": b.phase, "index": b.index, "layer": b.layer,
                "sub_block": b.sub_block, "op": b.op, "rank": self.rank, "attrs": self.attrs,
                "tensors": [t.to_json() for t in self.tensors]}


def manifest_path(root: Path, b: Boundary, rank: int) -> Path:
    return Path(root) / "manifests" / b.phase / f"r{rank}" / f"{b.index:04d}-{b.op}.json"


def encode(m: Manifest) -> bytes:
    return (json.dumps(m.to_json(), indent=1, sort_keys=True) + "\n").encode()


def read(path: Path, root: Path) -> bytes:
    """A manifest's bytes: a regular file inside the corpus, at most 1 MiB."""
    return read_regular(path, MAX_MANIFEST_BYTES, "manifest", root)


def parse(path: Path, expected: Boundary, rank: int, g: Geometry, raw: bytes | None = None,
          root: Path | None = None) -> Manifest:
    """Validate a manifest (its bytes `raw`, or read from `path`) against the boundary and geometry it
    must describe: the schema first, then every field against what the geometry expects."""
    def bad(msg):
        return CorpusError(f"{path}: {msg}")

    if raw is None:
        raw = read(path, root if root is not None else path.parent)
    d = parse_json(raw, path, "manifest")
    if not isinstance(d, dict):
        raise bad("manifest is not a JSON object")
    if d.get("schema") != SCHEMA:
        raise bad(f"unsupported manifest schema {str(d.get('schema'))[:40]!r} (this shell reads {SCHEMA})")
    check(d, MANIFEST, path, "manifest")
    want = {"phase": expected.phase, "index": expected.index, "op": expected.op, "rank": rank,
            "layer": expected.layer, "sub_block": expected.sub_block}
    for k, v in want.items():
        if d.get(k) != v:
            raise bad(f"field {k!r} is {d.get(k)!r}, expected {v!r}")
    attrs = d.get("attrs", {})
    if not isinstance(attrs, dict):
        raise bad("'attrs' is not an object")
    specs: list[TensorSpec] = op_tensors(expected, g)
    items = d.get("tensors")
    if not isinstance(items, list) or len(items) != len(specs):
        raise bad(f"expected {len(specs)} tensors for {expected.op}")
    entries = []
    for spec, t in zip(specs, items):
        if not isinstance(t, dict):
            raise bad("tensor entry is not an object")
        shape = t.get("shape")
        if (t.get("name") != spec.name or t.get("role") != spec.role or t.get("dtype") != spec.dtype
                or not isinstance(shape, list) or tuple(shape) != spec.shape):
            raise bad(f"tensor {t.get('name')!r} does not match {spec.name} {spec.role} {spec.dtype}{list(spec.shape)}")
        digest = t.get("digest")
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise bad(f"tensor {spec.name!r} digest {str(digest)[:80]!r} is not 64 lowercase hex characters")
        recipe = t.get("recipe")
        if recipe is not None and (not isinstance(recipe, dict) or len(json.dumps(recipe)) > 4096
                                   or spec.role != "param"):
            raise bad(f"tensor {spec.name!r} recipe is not a small JSON object on a param")
        entries.append(TensorEntry(spec.name, spec.role, spec.dtype, spec.shape, digest, recipe))
    return Manifest(expected, rank, tuple(entries), attrs)
