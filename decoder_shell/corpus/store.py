"""Corpus: the folder that holds corpus.json, manifests/ and blobs/ (DESIGN.md 5).

corpus.json is sealed: "manifests" holds the blake3 of every manifest file and "digest" the blake3
of corpus.json's canonical content (every other field), so an edited corpus.json or manifest is
refused on open ("corpus.json was modified", "manifest was modified") instead of replaying with the
wrong constants; blobs carry their own digests. The manifests read for the seal are kept and parsed
from those same bytes. A corpus written before the
seal existed opens only for `shell verify`, and `shell verify --record` seals it (docs/CORPUS.md).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import blake3
import numpy as np

from ..commands.ops import op_tensors
from ..contracts.allreduce import RingContract
from ..errors import CorpusError, UsageError
from ..geometry import Boundary, Geometry
from . import manifest as mf
from ..atomic import write_atomic
from . import recipe as rc
from .blobs import BlobStore, digest_of
from .files import parse_json, read_regular
from .schema import CORPUS, check

SCHEMA = 1
FORMAT = "decoder-shell-corpus"
MAX_CORPUS_JSON_BYTES = 32 << 20


def seal(doc: dict) -> str:
    """blake3 of corpus.json's canonical content: every field but "digest", keys sorted, no spaces."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    return blake3.blake3(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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
    def __init__(self, root: Path, info: CorpusInfo, reuse: Path | None = None):
        self.root = Path(root)
        self.info = info
        self.blobs = BlobStore(self.root, reuse)
        self.sealed = False
        self.new_blobs = 0
        self.reused_blobs = 0
        self._manifest_bytes: dict[str, bytes] = {}

    @property
    def geometry(self) -> Geometry:
        return self.info.geometry

    # --- create / open -------------------------------------------------------------------
    @classmethod
    def create(cls, root: Path, geometry: Geometry, source: dict, contract: RingContract,
               how: str, reuse: Path | None = None) -> "Corpus":
        """A new corpus in `root` (a writer's staging folder, publish.py); corpus.json is written last,
        by finalize(). `reuse`: the corpus this one replaces, whose unchanged blobs are linked."""
        info = CorpusInfo(geometry, dict(source, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
                          {"contract": contract.to_json(), "how": how})
        return cls(Path(root), info, reuse)

    @classmethod
    def open(cls, root: Path, require_seal: bool = True) -> "Corpus":
        """Open and check corpus.json: a regular file, the schema's types and bounds, then the seal."""
        root = Path(root)
        path = root / "corpus.json"
        if not root.is_dir():
            raise CorpusError(f"{root}: corpus folder does not exist")
        raw = read_regular(path, MAX_CORPUS_JSON_BYTES, f"corpus file (is {root} a corpus?)", root)
        d = parse_json(raw, path, "corpus file")
        if not isinstance(d, dict):
            raise CorpusError(f"{path}: corpus file is not a JSON object")
        if d.get("format") != FORMAT or d.get("schema") != SCHEMA:
            raise CorpusError(f"{path}: not a schema-{SCHEMA} {FORMAT} file")
        check(d, CORPUS, path, "corpus file")
        try:
            g = Geometry.from_json(d["geometry"])
            info = CorpusInfo(g, d.get("source", {}), d.get("collective", {}), d.get("parity", {}),
                              bool(d.get("rebased", False)), d.get("counts", {}))
            info.contract()
        except (KeyError, TypeError, ValueError, UsageError) as e:
            raise CorpusError(f"{path}: malformed geometry or contract ({e})") from None
        c = cls(root, info)
        if "digest" in d:
            if seal(d) != d["digest"] or not isinstance(d.get("manifests"), dict):
                raise CorpusError(f"{path}: corpus.json was modified: its content does not match its digest")
            c._check_manifests(d["manifests"])
            c.sealed = True
        elif require_seal:
            raise CorpusError(f"{path}: corpus.json carries no digest (written by an older shell); "
                              f"run `shell verify {root} --record` to seal it")
        return c

    def _manifest_rel(self, b: Boundary, rank: int) -> str:
        return os.path.relpath(mf.manifest_path(self.root, b, rank), self.root)

    def manifest_digests(self) -> dict[str, str]:
        """blake3 of every manifest file as it is on disk now (regular files inside the corpus)."""
        self._manifest_bytes.clear()
        out = {}
        for b in self.geometry.boundaries():
            for r in range(self.geometry.ranks):
                rel = self._manifest_rel(b, r)
                out[rel] = blake3.blake3(mf.read(self.root / rel, self.root)).hexdigest()
        return out

    def _check_manifests(self, sealed: dict) -> None:
        """Each manifest against its sealed digest; a changed one is parsed first for a precise error."""
        for b in self.geometry.boundaries():
            for r in range(self.geometry.ranks):
                rel = self._manifest_rel(b, r)
                path = self.root / rel
                data = mf.read(path, self.root)
                if blake3.blake3(data).hexdigest() != sealed.get(rel):
                    mf.parse(path, b, r, self.geometry, data, self.root)
                    raise CorpusError(f"{path}: manifest was modified after the corpus was sealed "
                                      "(its digest in corpus.json differs)")
                self._manifest_bytes[rel] = data

    def save(self) -> None:
        """Write corpus.json, sealed over its content and every manifest as they are on disk now."""
        doc = self.info.to_json()
        doc["manifests"] = self.manifest_digests()
        doc["digest"] = seal(doc)
        write_atomic(self.root / "corpus.json", (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
        self.sealed = True

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
                digest, new = self.blobs.put(a.tobytes())
                self.new_blobs += new
                self.reused_blobs += not new
            entries.append(mf.TensorEntry(spec.name, spec.role, spec.dtype, spec.shape, digest,
                                          recipes.get(spec.name)))
        m = mf.Manifest(b, rank, tuple(entries), attrs or {})
        write_atomic(mf.manifest_path(self.root, b, rank), mf.encode(m))
        self._manifest_bytes.pop(self._manifest_rel(b, rank), None)
        return m

    def manifest(self, b: Boundary, rank: int) -> mf.Manifest:
        """A validated manifest: from the bytes the seal was checked on, else read now."""
        rel = self._manifest_rel(b, rank)
        return mf.parse(self.root / rel, b, rank, self.geometry, self._manifest_bytes.get(rel), self.root)

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
