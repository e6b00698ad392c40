"""Collective contract inference: which member of the ring family did the service's all-reduce run?

The answer comes from data, never from a note about a backend: every captured collective's per-rank
inputs are folded by a candidate contract (contracts.allreduce, the definition of its bits) and the
candidate is accepted only if it reproduces every element of every collective on every rank. The
search walks a fixed grid of the family (FAMILY_GRID) from the simplest member up and stops at the
first that fits; candidates whose chunking is identical on the captured sizes are tried once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product

import blake3
import numpy as np

from ..contracts.allreduce import RingContract, allreduce, rank_order
from ..contracts.numerics import BF16, F32

#: The searched part of the family, each axis in order of preference (simplest first).
FAMILY_GRID = {
    "segments": (1, 2, 4, 8),
    "max_chunk_bytes": (0, *(1 << k for k in range(10, 23))),
    "chunks_per_rank": (1, 2, 3, 4),
    "direction": (1, -1),
    "accumulation": ("hop", "fp32"),
}


@dataclass(frozen=True)
class Collective:
    """One captured all-reduce: every rank's input and output (same shape and dtype)."""

    name: str
    inputs: tuple
    outputs: tuple


@dataclass
class Inference:
    contract: RingContract | None
    collectives: int
    elements: int
    tried: int
    reason: str = ""
    best: dict = field(default_factory=dict)
    consistent: list = field(default_factory=list)  # every behaviour that fits (see consistent())
    probes: int = 0  # probe collectives among those searched

    @property
    def found(self) -> bool:
        return self.contract is not None

    def describe(self) -> str:
        if self.found:
            return (f"{self.contract.describe()} reproduces all {self.collectives} collectives "
                    f"({self.elements:,} elements per rank, {self.probes} of them probes) after {self.tried} "
                    "candidates, the only behaviour of the family that does")
        if self.consistent:
            return f"no ring contract is identified: {self.reason}"
        return f"no ring contract reproduces the captured collectives: {self.reason}"

    def collective(self, fallback: RingContract, probes=()) -> dict:
        """corpus.json's `collective` entry recording this inference: the contract found (else
        `fallback`), how it was chosen, the inference itself and the probe outputs it searched.
        One definition for `shell verify --infer --record` and the capture's finalize."""
        entry = {"contract": (self.contract or fallback).to_json(), "how": "inferred" if self.found else "not inferred",
                 "inference": self.to_json()}
        if probes:
            entry["probes"] = probes
        return entry

    def to_json(self) -> dict:
        return {"found": self.found, "contract": self.contract.to_json() if self.found else None,
                "collectives": self.collectives, "elements": self.elements, "tried": self.tried,
                "reason": self.reason, "best": self.best, "description": self.describe(), "probes": self.probes,
                "consistent": [{"contract": c["contract"].to_json(), "description": c["contract"].describe(),
                                "members": c["members"]} for c in self.consistent]}


def offsets(ranks: int) -> list[int]:
    """Ring start offsets in preference order: 0, -1, +1, -2, +2, ... (one per residue mod R)."""
    out, seen = [], set()
    for k in range(ranks):
        for o in (-k, k):
            if o % ranks not in seen:
                seen.add(o % ranks)
                out.append(o)
    return out


def reproduces(contract: RingContract, c: Collective) -> bool:
    """True when `contract` gives every rank's captured output, bit for bit."""
    got = allreduce(list(c.inputs), contract)
    return all(_same_bits(got, out) for out in c.outputs)


def infer(collectives: list[Collective]) -> Inference:
    """Search the family for a contract that reproduces every element of every collective."""
    cs = list(collectives)
    if not cs:
        return Inference(None, 0, 0, 0, "the corpus holds no collectives")
    ranks = len(cs[0].inputs)
    elements = sum(int(np.asarray(c.inputs[0]).size) for c in cs)
    for c in cs:
        problem = _check_shape(c, ranks)
        if problem:
            return Inference(None, len(cs), elements, 0, problem)
        if not all(_same_bits(c.outputs[0], o) for o in c.outputs[1:]):
            return Inference(None, len(cs), elements, 0,
                             f"{c.name}: ranks hold different outputs (no ring all-reduce does that)")
    sizes = sorted({(int(np.asarray(c.inputs[0]).size), np.asarray(c.inputs[0]).dtype.itemsize) for c in cs})
    cs.sort(key=lambda c: np.asarray(c.inputs[0]).size)  # small ones reject most candidates cheaply
    tried, best = 0, (-1, None, "")
    for cand in _candidates(sizes, ranks):
        tried += 1
        passed = 0
        for c in cs:
            if not reproduces(cand, c):
                break
            passed += 1
        if passed == len(cs):
            return Inference(cand, len(cs), elements, tried)
        if passed > best[0]:
            best = (passed, cand, cs[passed].name)
    passed, cand, where = best
    return Inference(None, len(cs), elements, tried,
                     f"{tried} ring candidates tried; the best, {cand.describe()}, reproduces {passed} of "
                     f"{len(cs)} collectives and first differs at {where}",
                     {"contract": cand.to_json(), "reproduced": passed, "first_mismatch": where})


def _candidates(sizes, ranks: int):
    """The searched ring family in order, simplest first, one member per distinct chunk layout of these
    message sizes (members that differ only in chunking knobs these sizes never reach are skipped)."""
    seen_chunking = set()
    for seg, mcb, cpr in product(FAMILY_GRID["segments"], FAMILY_GRID["max_chunk_bytes"],
                                 FAMILY_GRID["chunks_per_rank"]):
        key = _chunking_key(RingContract(chunks_per_rank=cpr, max_chunk_bytes=mcb, segments=seg), sizes, ranks)
        if key in seen_chunking:
            continue
        seen_chunking.add(key)
        for off, d, acc in product(offsets(ranks), FAMILY_GRID["direction"], FAMILY_GRID["accumulation"]):
            yield RingContract(cpr, mcb, off, d, acc, seg)


def behaviour_key(contract: RingContract, sizes, ranks: int) -> bytes:
    """Equal keys: the two contracts give the same bits on every input of these sizes. The fold order
    decides, except that the first two ranks folded commute; and with fp32 data, or two ranks, hop and
    fp32 accumulation are the same arithmetic."""
    h = blake3.blake3()
    for n, itemsize in sizes:
        order = rank_order(contract, n, ranks, itemsize)
        order[:2] = np.sort(order[:2], axis=0)
        h.update(np.ascontiguousarray(order).tobytes())
        h.update(b"hop" if contract.accumulation == "hop" and itemsize == 2 and ranks > 2 else b"fp32")
    return h.digest()


def consistent(collectives: list[Collective], limit: int = 64) -> list[dict]:
    """Every behaviour of the searched family that reproduces all the collectives, simplest member
    first: [{"contract", "members"}]; more than one entry means the data does not decide."""
    cs = list(collectives)
    if not cs:
        return []
    ranks = len(cs[0].inputs)
    sizes = sorted({(int(np.asarray(c.inputs[0]).size), np.asarray(c.inputs[0]).dtype.itemsize) for c in cs})
    cs.sort(key=lambda c: np.asarray(c.inputs[0]).size)
    found: dict[bytes, dict] = {}
    for cand in _candidates(sizes, ranks):
        bkey = behaviour_key(cand, sizes, ranks)
        if bkey in found:
            found[bkey]["members"] += 1
            continue
        if all(reproduces(cand, c) for c in cs):
            found[bkey] = {"contract": cand, "members": 1}
            if len(found) >= limit:
                return list(found.values())
    return list(found.values())


def collectives_from_corpus(corpus) -> list[Collective]:
    """Every all-reduce boundary of a corpus, with each rank's captured input and output."""
    out = []
    g = corpus.geometry
    for b in g.boundaries():
        if not b.is_collective():
            continue
        ms = [corpus.manifest(b, r) for r in range(g.ranks)]
        out.append(Collective(b.name, tuple(corpus.load(m.tensor("x")) for m in ms),
                              tuple(corpus.load(m.tensor("out")) for m in ms)))
    return out


def probes_from_corpus(corpus) -> list[Collective]:
    """The probe all-reduces a capture ran on the service's TP group before its cycle (corpus.json
    collective.probes: size, dtype and the output blob; the inputs are contracts.probe's)."""
    from ..contracts.probe import probe_inputs
    from .manifest import dtype_of
    out = []
    for p in corpus.info.collective.get("probes", []):
        dtype = dtype_of(p["dtype"])
        kind = p.get("kind", "order")
        xs = probe_inputs(corpus.geometry.ranks, int(p["n"]), dtype, kind)
        y = np.frombuffer(corpus.blobs.get(p["out"], int(p["n"]) * dtype.itemsize), dtype=dtype)
        out.append(Collective(f"probe.{kind}.{p['dtype']}.{p['n']}", tuple(xs), (y,) * len(xs)))
    return out


def infer_corpus(corpus) -> Inference:
    """infer() over the captured collectives and the capture's probes; not identified unless exactly
    one behaviour of the family fits them all (every fitting one is listed either way)."""
    cs = collectives_from_corpus(corpus)
    probes = probes_from_corpus(corpus)
    found = infer(cs + probes)
    found.probes = len(probes)
    if found.found:
        found.consistent = consistent(cs + probes)
        if len(found.consistent) > 1:
            found.best = {"contract": found.contract.to_json()}
            found.contract = None
            found.reason = (f"{len(found.consistent)} behaviours of the ring family reproduce every captured "
                            "collective and no probe decides between them; capture again with probes")
    return found


def _chunking_key(base: RingContract, sizes, ranks: int) -> bytes:
    """Two contracts with equal keys fold every captured element in the same rank order."""
    h = blake3.blake3()
    for n, itemsize in sizes:
        h.update(np.ascontiguousarray(rank_order(base, n, ranks, itemsize)[0]).tobytes())
    return h.digest()


def _check_shape(c: Collective, ranks: int) -> str:
    xs = [np.asarray(x) for x in (*c.inputs, *c.outputs)]
    if len(c.inputs) != ranks or len(c.outputs) != ranks:
        return f"{c.name}: expected {ranks} ranks of inputs and outputs"
    if any(x.shape != xs[0].shape or x.dtype != xs[0].dtype for x in xs):
        return f"{c.name}: inputs and outputs differ in shape or dtype across ranks"
    if xs[0].dtype not in (BF16, F32):
        return f"{c.name}: dtype {xs[0].dtype} is not bfloat16 or float32"
    return ""


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
