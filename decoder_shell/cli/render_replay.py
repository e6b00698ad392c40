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
    for kind in ("settle", "graph", "changed", "profiled"):
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
    if len(tm["per_rank_ms"]) > 1 and graph and all(len(set(e.times_ms)) == 1 for e in graph):
        console.print("every rank shows the same time: this driver runs all ranks together, one command at a time "
                      "(a collective's time counts for every rank, an mHC command's is split evenly)")
    verdict = "EXACT" if result.exact else "MISMATCH"
    console.print(f"{verdict}: {sum(e.exact for e in graph)}/{len(graph)} graph epochs exact"
                  + (f", {sum(e.exact for e in result.of('changed'))}/{len(result.of('changed'))} changed epochs exact"
                     if result.of("changed") else ""))


def plot_epochs(series: dict, path: Path, title: str, changed: dict | None = None, reps: int = 1) -> None:
    """PNG of per-epoch cycle times, one line per rank (the slowest rank is a thin dashed line
    underneath, so no rank hides behind it).

    `series` maps a label (replay, baseline, candidate) to its graph EpochResults in run order;
    `changed` maps the same labels to changed epochs, drawn as crosses after the graph epochs in a
    shaded band; `reps` > 1 splits each series into that many repetitions (gate blocks), separated
    by vertical lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", ":", "-.", "--"]
    n_graph = max((len(es) for es in series.values()), default=0)
    for s, (label, epochs) in enumerate(series.items()):
        if not epochs:
            continue
        ranks = len(epochs[0].times_ms)
        xs = list(range(len(epochs)))
        ax.plot(xs, [e.cycle_ms for e in epochs], color="0.55", lw=0.7, ls="--", zorder=1,
                label=f"{label} slowest rank")
        for r in range(ranks):
            ax.plot(xs, [e.times_ms[r] for e in epochs], lw=1.0, ls=styles[s % len(styles)],
                    color=colors[r % len(colors)], marker="." if len(epochs) <= 200 else None, ms=3, zorder=2,
                    label=f"{label} rank {r}")
    if reps > 1 and n_graph:
        per = n_graph // reps
        for k in range(1, reps):
            ax.axvline(k * per - 0.5, color="0.3", lw=0.8, ls=":")
        ax.text(0, 1.01, f"{reps} repetitions of {per} epochs (dotted lines)", transform=ax.transAxes, fontsize=7)
    if changed and any(changed.values()):
        start = n_graph + 1
        n = max(len(es) for es in changed.values())
        ax.axvspan(start - 0.5, start + n - 0.5, color="0.92", zorder=0)
        for s, (label, epochs) in enumerate(changed.items()):
            for r in range(len(epochs[0].times_ms) if epochs else 0):
                ax.plot([start + i for i in range(len(epochs))], [e.times_ms[r] for e in epochs], "x",
                        color=colors[r % len(colors)], ms=5, zorder=3,
                        label=f"{label} changed epochs" if r == 0 else None)
        ax.text(start, 0.98, "changed epochs", transform=ax.get_xaxis_transform(), fontsize=7, va="top")
    ax.set_xlabel("epoch")
    ax.set_ylabel("ms per cycle")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def plot_replay(result, path: Path) -> None:
    """A replay result's plot: every rank's graph epochs, then its changed epochs."""
    plot_epochs({"replay": result.of("graph")}, Path(path), f"{result.corpus} on {result.driver}",
                changed={"replay": result.of("changed")})
