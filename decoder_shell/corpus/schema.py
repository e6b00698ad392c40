"""The JSON Schemas of corpus.json and of a manifest: every type fixed, every number bounded.

They are checked before anything is built from a file, so no field can ask for an allocation or a
loop larger than these bounds (a billion Sinkhorn iterations or segments, a fractional ring offset,
a NaN eps). Integers are strict (1.0 and true are not integers). Geometry sizes carry the bounds of
geometry.py; the memory a valid geometry needs is checked separately against the host (budget.py).
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
from jsonschema import Draft202012Validator

from ..contracts.numerics import DTYPES
from ..errors import CorpusError
from ..geometry import DRAFT_KINDS, MAX_HIDDEN, MAX_LAYERS, MAX_RANKS, MAX_ROWS, MOE_COMBINES, MOE_WEIGHTS, REDUCE_DTYPES

#: Bounds of the numbers in corpus.json that are not sizes (DeepSeek-V4: 20 iterations, eps 1e-6).
MAX_SINKHORN_ITERS = 100
MAX_EPS = 1e-2
MAX_SEGMENTS = 4096
MAX_CHUNKS_PER_RANK = 4096
MAX_CHUNK_BYTES = 1 << 40
MAX_COUNT = 1 << 50


def _int(lo: int, hi: int) -> dict:
    return {"type": "integer", "minimum": lo, "maximum": hi}


_EPS = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_EPS}
_TEXT = {"type": "string", "maxLength": 256}

GEOMETRY = {
    "type": "object",
    "additionalProperties": False,
    "required": ["preset", "hidden", "layers", "ranks", "verify_rows", "draft_rows"],
    "properties": {
        "preset": _TEXT,
        "hidden": _int(1, MAX_HIDDEN),
        "layers": _int(1, MAX_LAYERS),
        "ranks": _int(1, MAX_RANKS),
        "verify_rows": _int(1, MAX_ROWS),
        "draft_rows": _int(0, MAX_ROWS),
        "draft_kind": {"enum": sorted(DRAFT_KINDS)},
        "hc": {"const": 4},
        "reduce_dtype": {"enum": list(REDUCE_DTYPES)},
        "mhc": {"type": "object", "additionalProperties": False,
                "properties": {"hc_eps": _EPS, "norm_eps": _EPS,
                               "sinkhorn_iters": _int(1, MAX_SINKHORN_ITERS)}},
        "fused_norm": {"type": "boolean"},
        "moe": {"type": ["object", "null"], "additionalProperties": False,
                "properties": {"experts": _int(1, 1024), "top_k": _int(1, 16), "width": _int(1, 1 << 20),
                               "weights": {"enum": list(MOE_WEIGHTS)},
                               "combine": {"enum": list(MOE_COMBINES)}}},
        "attn": {"type": ["object", "null"], "additionalProperties": False,
                 "properties": {f: _int(1, 1 << 20) for f in ("q_lora", "kv", "heads", "head_dim", "o_groups",
                                                              "o_rank", "taps")}},
    },
}

CONTRACT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "chunks_per_rank": _int(1, MAX_CHUNKS_PER_RANK),
        "max_chunk_bytes": _int(0, MAX_CHUNK_BYTES),
        "offset": _int(-MAX_RANKS, MAX_RANKS),
        "direction": {"enum": [1, -1]},
        "accumulation": {"enum": ["hop", "fp32"]},
        "segments": _int(1, MAX_SEGMENTS),
    },
}

CORPUS = {
    "type": "object",
    "required": ["schema", "format", "geometry", "collective"],
    "properties": {
        "schema": {"const": 1},
        "format": {"const": "decoder-shell-corpus"},
        "geometry": GEOMETRY,
        "ranks": _int(1, MAX_RANKS),
        "phases": {"type": "array", "maxItems": 2},
        "source": {"type": "object", "maxProperties": 64},
        "collective": {"type": "object", "required": ["contract"],
                       "properties": {"contract": CONTRACT, "how": _TEXT}},
        "parity": {"type": "object", "maxProperties": 64},
        "rebased": {"type": "boolean"},
        "counts": {"type": "object", "maxProperties": 16, "additionalProperties": _int(0, MAX_COUNT)},
        "manifests": {"type": "object", "maxProperties": 2 * MAX_RANKS * (4 * MAX_LAYERS + 8),
                      "additionalProperties": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
        "digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    },
}

MANIFEST = {
    "type": "object",
    "required": ["schema", "phase", "index", "layer", "sub_block", "op", "rank", "tensors"],
    "properties": {
        "schema": {"const": 1},
        "phase": {"enum": ["draft", "verify"]},
        "index": _int(0, 4 * MAX_LAYERS + 8),
        "layer": _int(-1, MAX_LAYERS),
        "sub_block": _TEXT,
        "op": _TEXT,
        "rank": _int(0, MAX_RANKS - 1),
        "attrs": {"type": "object", "maxProperties": 64},
        "tensors": {"type": "array", "maxItems": 64, "items": {
            "type": "object",
            "required": ["name", "role", "dtype", "shape", "digest"],
            "properties": {"name": _TEXT, "role": {"enum": ["input", "param", "output"]},
                           "dtype": {"enum": sorted(DTYPES)},
                           "shape": {"type": "array", "maxItems": 8, "items": _int(0, 1 << 31)},
                           "digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}}},
    },
}

_STRICT = Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _checker, x: isinstance(x, int) and not isinstance(x, bool))
_Validator = jsonschema.validators.extend(Draft202012Validator, type_checker=_STRICT)
_VALIDATORS = {id(s): _Validator(s) for s in (CORPUS, MANIFEST)}


def check(doc, schema: dict, path: Path, what: str) -> None:
    """Raise a one-line CorpusError naming the file, the field and the rule when `doc` breaks `schema`."""
    err = jsonschema.exceptions.best_match(_VALIDATORS[id(schema)].iter_errors(doc))
    if err is None:
        return
    where = ".".join(map(str, err.absolute_path)) or "top level"
    msg = err.message if len(err.message) <= 160 else err.message[:160] + "..."
    raise CorpusError(f"{path}: malformed {what}: field {where}: {msg}")
