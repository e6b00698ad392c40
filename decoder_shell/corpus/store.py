"""Corpus: the folder that holds corpus.json, manifests/ and blobs/ (DESIGN.md 5)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..commands.ops import op_tensors
from ..contracts.allreduce import RingContract
from ..errors import CorpusError, UsageError
from ..geometry import Boundary, Geometry
from . import manifest as mf
from ..atomic import write_atomic
from . import recipe as rc
from .blobs import BlobStore, digest_of

SCHEMA = 1
FORMAT = "decoder-shell-corpus"


@dataclass
class CorpusInfo:
    """The contents of corpus.json."""

    geometry: Geometry
    source: dict = field(default_factory=dict)
    collective: dict = field(default_factory=dict)  # {"contract": {...}, "how": "synth|inferred|..."}
    parity: dict = field(default_factory=dict)  # op -> {"exact": bool, "max_ulp": int, ...}
    rebased: bool = False
    counts: dict = field(default_factory=dict)

    def contract(self) -> RingContract:
        return RingContract.from_json(self.collective.get("contract", {}))

    def to_json(self) -> dict:
        g = self.geometry
        return {"schema": SCHEMA, "format": FORMAT, "geometry": g.to_json(), "ranks": g.ranks,
                "phases": [{"name": p.name, "rows": p.rows, "sub_blocks": p.sub_blocks,
                            "boundaries": len(p.boundaries())} for p in g.phases],
                "source": self.source, "collective": self.collective, "parity": self.parity,
                "rebased": self.rebased, "counts": self.counts}


class Corpus:
    def __init__(self, root: Path, info: CorpusInfo):
        self.root = Path(root)
        self.info = info
        self.blobs = BlobStore(self.root)

    @property
    def geometry(self) -> Geometry:
        return self.info.geometry

    # --- create / open -------------------------------------------------------------------
    @classmethod
    def create(cls, root: Path, geometry: Geometry, source: dict, contract: RingContract,
               how: str) -> "Corpus":
        root = Path(root)
        if (root / "corpus.json").exists():
            existing = cls.open(root)
            if existing.geometry != geometry:
                raise UsageError(f"{root}: holds a corpus of another geometry; choose an empty --out folder")
        info = CorpusInfo(geometry, dict(source, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
                          {"contract": contract.to_json(), "how": how})
        c = cls(root, info)
        c.save()
        return c

    @classmethod
    def open(cls, root: Path) -> "Corpus":
        root = Path(root)
        path = root / "corpus.json"
        if not root.is_dir():
            raise CorpusError(f"{root}: corpus folder does not exist")
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise CorpusError(f"{path}: corpus file is missing (is {root} a corpus?)") from None
        try:
            d = json.loads(raw)
            if not isinstance(d, dict):
                raise ValueError("not an object")
        except (ValueError, UnicodeDecodeError) as e:
            raise CorpusError(f"{path}: corpus file is not valid JSON ({e})") from None
        if d.get("format") != FORMAT or d.get("schema") != SCHEMA:
            raise CorpusError(f"{path}: not a schema-{SCHEMA} {FORMAT} file")
        try:
            g = Geometry.from_json(d["geometry"])
            info = CorpusInfo(g, d.get("source", {}), d.get("collective", {}), d.get("parity", {}),
                              bool(d.get("rebased", False)), d.get("counts", {}))
            info.contract()
        except (KeyError, TypeError, ValueError, UsageError) as e:
            raise CorpusError(f"{path}: malformed geometry or contract ({e})") from None
        return cls(root, info)

    def save(self) -> None:
        write_atomic(self.root / "corpus.json",
                     (json.dumps(self.info.to_json(), indent=1, sort_keys=True) + "\n").encode())

    # --- manifests and tensors -----------------------------------------------------------
    def write(self, b: Boundary, rank: int, tensors: dict[str, np.ndarray], attrs: dict | None = None,
              recipes: dict | None = None) -> mf.Manifest:
        """Store a boundary's tensors (blobs first, manifest last, each atomic). A tensor named in
        `recipes` is recorded as its recipe and digest (checked here: the recipe must reproduce it)."""
        recipes = recipes or {}
        entries = []
        for spec in op_tensors(b, self.geometry):
            a = np.ascontiguousarray(tensors[spec.name])
            if a.dtype != mf.dtype_of(spec.dtype) or a.shape != spec.shape:
                raise UsageError(f"{b.name} rank {rank}: tensor {spec.name} is {a.dtype}{list(a.shape)}, "
                                 f"expected {spec.dtype}{list(spec.shape)}")
            if spec.name in recipes:
                digest = digest_of(a.tobytes())
                rc.load(recipes[spec.name], a.dtype, a.shape, digest, f"{b.name} rank {rank} tensor {spec.name}")
            else:
                digest, _ = self.blobs.put(a.tobytes())
            entries.append(mf.TensorEntry(spec.name, spec.role, spec.dtype, spec.shape, digest,
                                          recipes.get(spec.name)))
        m = mf.Manifest(b, rank, tuple(entries), attrs or {})
        write_atomic(mf.manifest_path(self.root, b, rank), mf.encode(m))
        return m

    def manifest(self, b: Boundary, rank: int) -> mf.Manifest:
        p = mf.manifest_path(self.root, b, rank)
        if (self.root / "manifests").resolve() not in p.resolve().parents:
            raise CorpusError(f"{p}: manifest path escapes the corpus")
        return mf.parse(p, b, rank, self.geometry)

    def manifests(self):
        """Every (rank, boundary) manifest in cycle order, validated."""
        for b in self.geometry.boundaries():
            for r in range(self.geometry.ranks):
                yield self.manifest(b, r)

    def load(self, t: mf.TensorEntry) -> np.ndarray:
        if t.recipe is not None:
            data = rc.load(t.recipe, mf.dtype_of(t.dtype), t.shape, t.digest,
                           f"{self.root}: tensor {t.name} ({t.digest[:16]})")
        else:
            data = self.blobs.get(t.digest, t.nbytes)
        return np.frombuffer(data, dtype=mf.dtype_of(t.dtype)).reshape(t.shape)

    def finalize(self) -> None:
        """Recount blobs and bytes into corpus.json."""
        raw, count, refs = 0, 0, 0
        seen = set()
        recipes = set()
        for m in self.manifests():
            for t in m.tensors:
                refs += 1
                raw += t.nbytes
                (recipes if t.recipe is not None else seen).add((t.digest, t.nbytes))
        stored = 0
        for digest, nbytes in seen:
            stored += self.blobs.stored_size(digest)
            count += 1
        unique_raw = sum(n for _, n in seen)
        self.info.counts = {"manifests": self.geometry.ranks * len(self.geometry.boundaries()),
                            "tensor_refs": refs, "blobs": count, "referenced_bytes": raw,
                            "unique_bytes": unique_raw, "stored_bytes": stored,
                            "recipe_tensors": len(recipes), "recipe_bytes": sum(n for _, n in recipes)}
        self.save()
