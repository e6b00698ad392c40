"""Bind a corpus to its cycle program: the captured value of every buffer on every rank."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..commands.program import Cycle
from ..errors import CorpusError
from .store import Corpus


@dataclass
class Bound:
    """Captured data laid onto a cycle's buffers."""

    injected: list[dict[int, np.ndarray]]  # per rank: param and input buffers
    captured: list[dict[int, np.ndarray]]  # per rank: output buffers, as captured
    digests: list[dict[int, str]]  # per rank: buffer -> digest (outputs and injected)
    broken_links: list[str] = field(default_factory=list)
    referenced: set = field(default_factory=set)  # every blob digest a manifest names
    checked: set = field(default_factory=set)  # every blob read back and digest-checked


def bind(corpus: Corpus, cyc: Cycle, progress=None) -> Bound:
    """Read every manifest (validated) and every blob (digest-checked, each unique blob once).

    A linked input whose digest differs from its producer's output is a broken link: recorded, since
    verify reports it; replay refuses such a corpus."""
    cache: dict[str, np.ndarray] = {}
    ranks = cyc.ranks
    b = Bound([{} for _ in range(ranks)], [{} for _ in range(ranks)], [{} for _ in range(ranks)])
    for cmd in cyc.commands:
        for r in range(ranks):
            m = corpus.manifest(cmd.boundary, r)
            for t in m.tensors:
                bid = cmd.inputs.get(t.name, cmd.outputs.get(t.name))
                buf = cyc.buffers[bid]
                b.referenced.add(t.digest)
                if t.digest not in cache:
                    cache[t.digest] = corpus.load(t)
                    b.checked.add(t.digest)
                value = cache[t.digest]
                if value.shape != buf.shape or value.dtype != buf.dtype:
                    # one blob, two tensors of the same bytes but another shape or dtype (tiny scale blocks)
                    value = value.reshape(-1).view(np.uint8).view(buf.dtype).reshape(buf.shape)
                if t.name in cmd.outputs:
                    b.captured[r][bid] = value
                    b.digests[r][bid] = t.digest
                elif buf.boundary == cmd.boundary:
                    b.injected[r][bid] = value
                    b.digests[r][bid] = t.digest
                elif b.digests[r].get(bid) != t.digest:
                    b.broken_links.append(f"rank {r} {cmd.boundary.name}.{t.name} is not "
                                          f"{buf.name} (digests differ)")
        if progress:
            progress(cmd)
    return b


def require_linked(bound: Bound, corpus: Corpus) -> None:
    if bound.broken_links:
        n = len(bound.broken_links)
        raise CorpusError(f"{corpus.root}: {n} broken link(s), first: {bound.broken_links[0]}; run `shell verify`")
