"""Human tables and plots for replay results (JSON comes from the results' to_json)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table


def fmt_ms(v) -> str:
    """Milliseconds as every report prints them (three decimals; '-' where none was measured)."""
    return "-" if v is None else f"{v:.3f}"


def render_replay(result, console: Console) -> None:
    g = result.geometry
    console.print(f"corpus   {result.corpus}  ({g['preset']}, D={g['hidden']}, layers={g['layers']}, "
                  f"TP={g['ranks']}, verify M={g['verify_rows']}, draft M={g['draft_rows']} {g['draft_kind']})")
    console.print(f"driver   {result.driver}; {result.commands_per_rank} commands per rank; "
                  f"expected outputs: {result.expected}")
    t = Table(title="exactness (elements whose bits differ)")
    t.add_column("epochs")
    t.add_column("exact", justify="right")
    ranks = g["ranks"]
    for r in range(ranks):
        t.add_column(f"rank {r}", justify="right")
    for kind in ("settle", "graph", "changed"):
        es = result.of(kind)
        if not es:
            continue
        t.add_row(kind, f"{sum(e.exact for e in es)}/{len(es)}",
                  *[str(sum(e.mismatches[r] for e in es)) for r in range(ranks)])
    console.print(t)
    bad_ops = {}
    for e in result.epochs:
        for op, n in e.by_op.items():
            bad_ops[op] = bad_ops.get(op, 0) + n
    if bad_ops:
        console.print("mismatching elements by op: " + ", ".join(f"{k}={v}" for k, v in sorted(bad_ops.items())))
    tm = result.timing()
    tt = Table(title=f"time per cycle, ms ({len(result.of('graph'))} graph epochs after {result.settle} settle)"
               + ("" if result.timing_meaningful else f" - {result.timing_note}"))
    for c in ("", "median", "p10", "p90"):
        tt.add_column(c, justify="right")
    for r, p in enumerate(tm["per_rank_ms"]):
        tt.add_row(f"rank {r}", fmt_ms(p["median"]), fmt_ms(p["p10"]), fmt_ms(p["p90"]))
    c = tm["cycle_ms"]
    tt.add_row("slowest rank", fmt_ms(c["median"]), fmt_ms(c["p10"]), fmt_ms(c["p90"]), style="bold")
    console.print(tt)
    graph = result.of("graph")
    verdict = "EXACT" if result.exact else "MISMATCH"
    console.print(f"{verdict}: {sum(e.exact for e in graph)}/{len(graph)} graph epochs exact"
                  + (f", {sum(e.exact for e in result.of('changed'))}/{len(result.of('changed'))} changed epochs exact"
                     if result.of("changed") else ""))


def plot_epochs(series: dict, path: Path, title: str) -> None:
    """PNG of per-epoch, per-rank cycle times; `series` maps a label to a list of EpochResult."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for label, epochs in series.items():
        if not epochs:
            continue
        ranks = len(epochs[0].times_ms)
        xs = list(range(len(epochs)))
        for r in range(ranks):
            ax.plot(xs, [e.times_ms[r] for e in epochs], lw=0.8, alpha=0.6, label=f"{label} rank {r}")
        ax.plot(xs, [e.cycle_ms for e in epochs], lw=2, label=f"{label} slowest rank")
    ax.set_xlabel("epoch")
    ax.set_ylabel("ms per cycle")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
