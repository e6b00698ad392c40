"""verify: integrity, schema, links, cross-rank exactness and contract parity of a corpus."""

from __future__ import annotations

from collections import defaultdict

from ..commands.ops import run_allreduce, run_local
from ..commands.program import build_cycle
from ..contracts.bits import max_ulp, mismatches
from .bind import bind
from .store import Corpus


def verify(corpus: Corpus, progress=None, parity_progress=None) -> dict:
    """Check everything a replay relies on; returns a report (raises CorpusError on unreadable data).

    Parity recomputes every op from its own captured inputs (not chained), so one inexact op is
    reported where it happens instead of spreading down the cycle. `progress(cmd)` follows the reading,
    `parity_progress(cmd)` the recomputing, one call per command each."""
    g = corpus.geometry
    cyc = build_cycle(g, corpus.info.contract())
    bound = bind(corpus, cyc, progress)
    values = [{**bound.injected[r], **bound.captured[r]} for r in range(g.ranks)]

    phases = {}
    for p in g.phases:
        bs = p.boundaries()
        ops = defaultdict(int)
        for b in bs:
            ops[b.op] += 1
        phases[p.name] = {"rows": p.rows, "boundaries": len(bs), "reductions": ops["allreduce"],
                          "post_pre": ops["mhc_post_pre"], "pre": ops["mhc_pre"] + ops["mhc_pre_streams"], "head": ops["mhc_post_head"]}

    cross_rank = []
    parity = defaultdict(lambda: {"boundaries": 0, "exact": 0, "mismatched_elements": 0, "max_ulp": 0.0})
    for cmd in cyc.commands:
        if cmd.op == "allreduce":
            bid = cmd.outputs["out"]
            ds = {bound.digests[r][bid] for r in range(g.ranks)}
            if len(ds) != 1:
                cross_rank.append(cmd.boundary.name)
            got = run_allreduce([values[r][cmd.inputs["x"]] for r in range(g.ranks)], cyc.contract)
            results = [{"out": got}] * g.ranks
        else:
            results = [run_local(cmd.op, {k: values[r][i] for k, i in cmd.inputs.items()}, g)
                       for r in range(g.ranks)]
        p = parity[cmd.op]
        p["boundaries"] += 1
        n_all, ulp = 0, 0.0
        for r in range(g.ranks):
            for name, bid in cmd.outputs.items():
                n = mismatches(results[r][name], values[r][bid])
                if n:
                    n_all += n
                    ulp = max(ulp, max_ulp(results[r][name], values[r][bid]))
        p["exact"] += n_all == 0
        if parity_progress:
            parity_progress(cmd)
        p["mismatched_elements"] += n_all
        p["max_ulp"] = max(p["max_ulp"], ulp)

    parity = dict(parity)
    ok_links = not bound.broken_links
    exact = all(p["exact"] == p["boundaries"] for p in parity.values())
    return {
        "corpus": str(corpus.root),
        "geometry": g.to_json(),
        "phases": phases,
        "integrity": "ok" if bound.checked == bound.referenced else
                     f"{len(bound.referenced - bound.checked)} blob(s) not checked",
        "blobs_checked": len(bound.checked),
        "linked": ok_links,
        "broken_links": bound.broken_links[:20],
        "cross_rank_exact": not cross_rank,
        "cross_rank_mismatch": cross_rank[:20],
        "contract": cyc.contract.describe(),
        "parity": parity,
        "parity_exact": exact,
        "ok": ok_links and not cross_rank and bound.checked == bound.referenced,
    }


def mhc_parity(parity: dict) -> tuple[bool, float]:
    """Whether every mHC op (all but the all-reduce) of a parity report is bit-exact, and its largest ulp."""
    mhc = [p for op, p in parity.items() if op != "allreduce"]
    return all(p["exact"] == p["boundaries"] for p in mhc), max((p["max_ulp"] for p in mhc), default=0.0)


def record_parity(corpus: Corpus, report: dict) -> None:
    """Store the measured parity in corpus.json; an inexact mHC parity marks the corpus rebased."""
    mhc_exact, _ = mhc_parity(report["parity"])
    corpus.info.parity = {"how": "verify", "ops": report["parity"]}
    corpus.info.rebased = not mhc_exact
    corpus.save()
