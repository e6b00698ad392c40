"""inspect: what a corpus holds (manifests, unique blobs, raw and stored bytes, dedup ratio)."""

from __future__ import annotations

from collections import Counter

from .store import Corpus


def inspect(corpus: Corpus) -> dict:
    g = corpus.geometry
    unique: dict[str, int] = {}
    refs = 0
    raw = 0
    raw_recipes = 0
    per_role = Counter()
    per_op = Counter()
    recipes: dict[str, int] = {}
    for m in corpus.manifests():
        per_op[m.boundary.op] += 1
        for t in m.tensors:
            refs += 1
            raw += t.nbytes
            per_role[t.role] += t.nbytes
            raw_recipes += t.nbytes if t.recipe is not None else 0
            (recipes if t.recipe is not None else unique)[t.digest] = t.nbytes
    present = set(corpus.blobs.digests())
    stored = sum(corpus.blobs.stored_size(d) for d in unique if d in present)
    unique_raw = sum(unique.values())
    return {
        "corpus": str(corpus.root), "geometry": g.to_json(), "source": corpus.info.source,
        "contract": corpus.info.contract().describe(), "rebased": corpus.info.rebased,
        "manifests": sum(per_op.values()), "manifests_per_op": dict(per_op), "tensor_refs": refs,
        "unique_blobs": len(unique), "missing_blobs": len(set(unique) - present),
        "unreferenced_blobs": len(present - set(unique)),
        "referenced_bytes": raw, "unique_bytes": unique_raw, "stored_bytes": stored,
        "dedup_ratio": (raw - raw_recipes) / unique_raw if unique_raw else 1.0,
        "compression_ratio": unique_raw / stored if stored else 1.0,
        "bytes_per_role": dict(per_role),
        "recipe_tensors": len(recipes), "recipe_bytes": sum(recipes.values()),
    }
