"""Human rendering of a verify report."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def render_verify(rep: dict, console: Console) -> None:
    g = rep["geometry"]
    console.print(f"corpus {rep['corpus']}: {g['preset']} D={g['hidden']} layers={g['layers']} TP={g['ranks']}")
    t = Table(title="boundaries per rank")
    for c in ("phase", "rows", "reductions", "post/pre", "pre", "head"):
        t.add_column(c, justify="right")
    for name, p in rep["phases"].items():
        t.add_row(name, str(p["rows"]), str(p["reductions"]), str(p["post_pre"]), str(p["pre"]), str(p["head"]))
    console.print(t)
    console.print(f"integrity: {rep['integrity']} (every blob digest-checked)")
    console.print(f"linked: {'yes' if rep['linked'] else 'NO'}" +
                  ("" if rep["linked"] else f" ({len(rep['broken_links'])}+ broken, first: {rep['broken_links'][0]})"))
    console.print(f"cross-rank exact: {'yes' if rep['cross_rank_exact'] else 'NO'}" +
                  ("" if rep["cross_rank_exact"] else f" (first: {rep['cross_rank_mismatch'][0]})"))
    console.print(f"collective contract: {rep['contract']}")
    console.print(parity_table(rep["parity"], "contract parity"))
    console.print("parity: " + ("exact" if rep["parity_exact"] else "NOT exact (replay rebases after `verify --record`)"))


def parity_table(parity: dict, title: str) -> Table:
    """A verify report's parity per op, as `shell verify` and `shell capture` print it."""
    pt = Table(title=f"{title} (each op recomputed from its captured inputs)")
    for c in ("op", "boundaries", "exact", "mismatched elements", "max ulp"):
        pt.add_column(c, justify="right")
    for op, p in parity.items():
        pt.add_row(op, str(p["boundaries"]), str(p["exact"]), str(p["mismatched_elements"]), f"{p['max_ulp']:g}")
    return pt
