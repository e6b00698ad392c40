"""Human tables of a replay's breakdown (replay/breakdown.py computes it): per op kind and phase,
per all-reduce and per node."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def _ms(v) -> str:
    return "-" if v is None else f"{v:.4f}"


def _size(n: int) -> str:
    """MiB, as every text output of the shell (JSON keeps bytes)."""
    return f"{n / 2**20:.4f} MiB"


def render_breakdown(b: dict, console: Console, commands: bool = True) -> None:
    """Tables: per op kind by phase, per all-reduce (size, algbw, busbw) and per command."""
    phases = list(b["phases"])
    kinds = list(b["kinds"])
    t = Table(title=f"time per op kind and phase, ms (one profiled epoch: {b['how']})")
    t.add_column("op kind")
    t.add_column("nodes", justify="right")
    for ph in phases:
        t.add_column(ph, justify="right")
    t.add_column("total", justify="right")
    t.add_column("share", justify="right")
    total = b["total_ms"] or 1.0
    for k in kinds:
        t.add_row(k, str(b["kinds"][k]["nodes"]), *[_ms(b["phases"][ph].get(k, 0.0)) for ph in phases],
                  _ms(b["kinds"][k]["ms"]), f"{100 * b['kinds'][k]['ms'] / total:.1f}%")
    t.add_row("all", str(len(b["nodes"])), *[_ms(b["phases"][ph]["total"]) for ph in phases], _ms(b["total_ms"]),
              "100.0%", style="bold")
    console.print(t)
    if b["collectives"]:
        c = Table(title=f"all-reduces ({b['ranks']} ranks; algbw = size / time, busbw = algbw x {b['bus_factor']:.3f}, "
                        "as nccl-tests)")
        for col in ("boundary", "size", "ms", "algbw GB/s", "busbw GB/s"):
            c.add_column(col, justify="left" if col == "boundary" else "right")
        for a in b["collectives"]:
            c.add_row(a["boundary"], _size(a["bytes"]), _ms(a["ms"]),
                      "-" if a["algbw_GBps"] is None else f"{a['algbw_GBps']:.3f}",
                      "-" if a["busbw_GBps"] is None else f"{a['busbw_GBps']:.3f}")
        console.print(c)
    if commands:
        n = Table(title="time per node, ms (in launch order)")
        for col in ("command", "boundary", "node", "kind", "ms"):
            n.add_column(col, justify="right" if col in ("command", "ms") else "left")
        for r in b["nodes"]:
            n.add_row("-" if r["command"] is None else str(r["command"]), r["boundary"], r["node"], r["kind"],
                      _ms(r["ms"]))
        console.print(n)
