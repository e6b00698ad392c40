"""Human table of a corpus's memory per rank (replay/memory.py computes it)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

MIB = 1 << 20


def _mib(n: int) -> str:
    return f"{n / MIB:,.1f}"


def _stages(stages: dict) -> str:
    """'draft 3 x 1,147.5' where a phase's stages hold the same, else each stage's MiB."""
    phases: dict[str, list[int]] = {}
    for key, n in stages.items():
        phases.setdefault(key.split()[0], []).append(n)
    return "; ".join(f"{ph} {len(v)} x {_mib(v[0])}" if len(set(v)) == 1 else f"{ph} " + " / ".join(map(_mib, v))
                     for ph, v in phases.items())


def _rows(r: dict) -> list[tuple]:
    rows = [(p["part"], _stages(p["stages"]), _mib(p["bytes"]), _mib(p["expanded_bytes"])) for p in r["parts"]]
    rows.append(("weights", "", _mib(r["weights_bytes"]), _mib(r["weights_expanded_bytes"])))
    rows.append(("activations (inputs, outputs)", "", _mib(r["activations_bytes"]), ""))
    rows += [(f"arena {name}", "", _mib(n), "") for name, n in r["arenas"].items()]
    if r["session_bytes"] is not None:
        rows.append(("session (all arenas)", "", _mib(r["session_bytes"]), ""))
    if r["expanded_arena_bytes"]:
        rows.append(("+ arena of moe-expanded experts", "", _mib(r["expanded_arena_bytes"]), ""))
    return rows


def render_memory(m: dict, console: Console) -> None:
    """One table per group of ranks holding the same: weight parts (per stage, as stored, bf16
    expanded), activations, the arenas the cuda driver allocates."""
    groups: list[tuple[list[int], list[tuple]]] = []
    for r in m["ranks"]:
        rows = _rows(r)
        same = [g for g in groups if g[1] == rows]
        if same:
            same[0][0].append(r["rank"])
        else:
            groups.append(([r["rank"]], rows))
    for ranks, rows in groups:
        t = Table(title=f"device memory per rank (rank {', '.join(map(str, ranks))}), MiB")
        for col in ("part", "per stage", "as stored", "bf16 expanded"):
            t.add_column(col, justify="left" if col in ("part", "per stage") else "right")
        for row in rows:
            t.add_row(*row, style="bold" if row[0] in ("weights", "session (all arenas)") else None)
        console.print(t)
    console.print(m["note"])
