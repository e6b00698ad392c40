"""Human rendering of a gate verdict (live or re-read from its JSON file) and its per-epoch plot."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..replay.verdict import epochs_from_json
from .render_replay import fmt_ms, plot_epochs

_STYLE = {"PASS": "bold green", "FAIL": "bold red", "UNTIMED": "bold yellow"}


def describe_changes(v: dict) -> list[str]:
    out = []
    for c in v["changes"]:
        names = c["boundaries"]
        span = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
        what = f"--delete {c['selector']} ({c['impl']})" if c["deletion"] else f"{c['selector']} = {c['impl']}"
        out.append(f"{what}: {c['commands']} command(s) per rank, {span}")
    return out


def render_gate(v: dict, console: Console) -> None:
    console = _Plain(console)
    g = v["geometry"]
    ranks = g["ranks"]
    console.print(f"corpus   {v['corpus']}  ({g['preset']}, D={g['hidden']}, layers={g['layers']}, TP={ranks}, "
                  f"verify M={g['verify_rows']}, draft M={g['draft_rows']})")
    console.print(f"driver   {v['driver']}; {v['commands_per_rank']} commands per rank; "
                  f"expected outputs: {v['expected']}")
    for line in describe_changes(v):
        console.print(f"change   {line}")
    s = v["settings"]
    console.print(f"runs     {s['settle']} settle, then {s['reps']} x (baseline {s['epochs']} graph epochs, "
                  f"candidate {s['epochs']} graph epochs), then {s['changed']} changed eager epochs each")
    if v["mode"] == "bound":
        console.print("mode     deletion-only upper bound: the most that optimizing these commands could save; "
                      "exactness is not required (mismatch counts are for information)")
    _exactness(v, console, ranks)
    _timing(v, console, ranks)
    sv = v["saved_ms"]
    console.print(f"saved ms/cycle at the slowest rank: median {fmt_ms(sv['median'])}, conservative "
                  f"{fmt_ms(sv['conservative'])} (candidate's slowest repetition vs baseline's fastest); "
                  f"threshold {s['threshold_ms']:.3f}"
                  + ("" if v["timing_meaningful"] else f" - {v.get('timing_note') or 'host times'}, not meaningful"))
    console.print(f"exactness: {v['exactness_verdict']}; time: {v['time_verdict']}")
    verdict = v["verdict"]
    console.print(verdict + (": " + "; ".join(v["reasons"]) if v["reasons"] else ""), style=_STYLE.get(verdict, "bold"))


class _Plain:
    """Print without markup: paths, selectors and reasons may contain brackets."""

    def __init__(self, console: Console):
        self._console = console

    def print(self, obj, style=None):
        self._console.print(obj, style=style, markup=False)


def _exactness(v: dict, console: Console, ranks: int) -> None:
    required = v["exactness"]["required"]
    t = Table(title="exactness (elements whose bits differ)" + ("" if required else " - not required"))
    for c in ("side", "epochs", "exact"):
        t.add_column(c, justify="right" if c != "side" else "left")
    for r in range(ranks):
        t.add_column(f"rank {r}", justify="right")
    for side in ("baseline", "candidate"):
        ex = v["exactness"][side]
        for kind, label in (("settle", "settle"), ("graph", "graph"), ("changed", "changed (eager)")):
            k = ex[kind]
            if k["epochs"]:
                t.add_row(f"{side} {label}", str(k["epochs"]), f"{k['exact']}/{k['epochs']}",
                          *[str(n) for n in k["per_rank"]])
    console.print(t)
    ops: dict[str, list[int]] = {}
    for kind in ("settle", "graph", "changed"):
        for op, counts in v["exactness"]["candidate"][kind]["by_op"].items():
            acc = ops.setdefault(op, [0] * ranks)
            for r, n in enumerate(counts):
                acc[r] += n
    if ops:
        bt = Table(title="candidate mismatching elements by op (all epochs)"
                   + ("" if required else " - not required"))
        bt.add_column("op")
        for r in range(ranks):
            bt.add_column(f"rank {r}", justify="right")
        bt.add_column("total", justify="right")
        for op, counts in sorted(ops.items()):
            bt.add_row(op, *[str(n) for n in counts], str(sum(counts)))
        console.print(bt)
        console.print(f"first mismatch: {v['exactness']['candidate']['first']}")


def _timing(v: dict, console: Console, ranks: int) -> None:
    note = "" if v["timing_meaningful"] else f" - {v.get('timing_note') or 'host numpy times, not device times'}"
    t = Table(title=f"time per cycle at the slowest rank, ms (graph epochs){note}")
    for c in ("side", "median", "p10", "p90", "repetition medians"):
        t.add_column(c, justify="left" if c in ("side", "repetition medians") else "right")
    for side in ("baseline", "candidate"):
        tm = v["timing"][side]
        c = tm["cycle_ms"]
        t.add_row(side, fmt_ms(c["median"]), fmt_ms(c["p10"]), fmt_ms(c["p90"]), " ".join(fmt_ms(x) for x in tm["reps_ms"]))
    console.print(t)
    rt = Table(title=f"median time per rank, ms{note}")
    for c in ("rank", "baseline", "candidate", "saved"):
        rt.add_column(c, justify="right")
    for r in range(ranks):
        b = v["timing"]["baseline"]["per_rank_ms"][r]["median"]
        c = v["timing"]["candidate"]["per_rank_ms"][r]["median"]
        rt.add_row(str(r), fmt_ms(b), fmt_ms(c), fmt_ms(v["saved_ms"]["per_rank_median"][r]))
    console.print(rt)


def plot_gate(v: dict, path: Path) -> None:
    """Per-epoch, per-rank cycle times of baseline and candidate (graph epochs, in run order per side)."""
    what = "; ".join(f"{c['selector']}={c['impl']}" if not c["deletion"] else f"delete {c['selector']}"
                     for c in v["changes"])
    sv = v["saved_ms"]
    title = (f"gate {what} on {v['driver']}\nsaved {fmt_ms(sv['median'])} ms/cycle median, "
             f"{fmt_ms(sv['conservative'])} conservative -> {v['verdict']}")
    sides = ("baseline", "candidate")
    plot_epochs({s: epochs_from_json(v, s) for s in sides}, Path(path), title,
                changed={s: epochs_from_json(v, s, "changed") for s in sides}, reps=int(v["settings"]["reps"]))
