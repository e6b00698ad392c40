#!/usr/bin/env python3
"""The MoE cycle on a Level Zero GPU against the cpu driver, every output of every rank, one command.

For tiny-moe TP2 corpora (packed and expanded expert weights, dspark and mtp1 drafts, exact-official and
fused combine, T = 5 rows) it
synthesizes the corpus, loads the cycle on the level-zero driver and on the cpu driver (the contracts),
feeds both the same inputs and compares every output buffer of every rank bit for bit after: graph
epochs (the immutable command list), one eager epoch (SYCL submissions), and changed epochs (new inputs
written in place, then the same command list). Prints one table row per corpus.

    python tools/level_zero_moe_check.py [--device gpu|cpu] [--epochs 3] [--changed 2] [--json out.json]

`--device gpu` (the default) needs a Level Zero GPU; `--device cpu` runs the same comparison through
Intel's OpenCL CPU runtime (the SYCL path). `--delete OP` leaves that MoE command out of the level-zero
cycle, to see the comparison catch it. Exit 0 when every element of every rank is exact, 1 on a mismatch,
2 on bad usage, 3 without the device, 4 when a kernel does not build.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoder_shell.commands.values import changed_inputs  # noqa: E402
from decoder_shell.corpus.synth import synth  # noqa: E402
from decoder_shell.drivers.cpu import CpuDriver  # noqa: E402
from decoder_shell.errors import ShellError  # noqa: E402
from decoder_shell.geometry import MOE_OPS, preset  # noqa: E402
from decoder_shell.replay.compare import compare_outputs  # noqa: E402
from decoder_shell.replay.engine import load_inputs, prepare  # noqa: E402

#: (weights, draft kind, combine mode): the preset's exact-official combine in every form, the fused one twice.
CASES = (("packed", "dspark", "official"), ("expanded", "dspark", "official"), ("packed", "mtp1", "official"),
         ("expanded", "mtp1", "official"), ("packed", "dspark", "fused"), ("expanded", "mtp1", "fused"))


def outputs(session, cycle) -> list[dict]:
    return [{b.id: session.read(r, b.id) for b in cycle.outputs()} for r in range(cycle.ranks)]


def check_case(driver, corpus, epochs: int, changed: int, delete: str | None) -> dict:
    """Every epoch of one corpus: mismatching elements per rank and per op, against the cpu driver."""
    cycle, bound = prepare(corpus)
    variants = {c.index: "delete" for c in cycle.commands if c.op == delete}
    rows = {"ranks": cycle.ranks, "commands": len(cycle.commands), "epochs": [], "per_rank": [0] * cycle.ranks,
            "by_op": {}, "first": None}
    with CpuDriver().load(cycle) as ref, driver.load(cycle, variants) as dev:
        sessions = (ref, dev)
        for s in sessions:
            load_inputs(s, bound.injected)
        epochs_run = [("graph", None)] * epochs + [("eager", None)] + [("changed", k) for k in range(changed)]
        for kind, k in epochs_run:
            if kind == "changed":  # new inputs written in place; the same command list runs again
                new = changed_inputs(cycle, 0, k)
                for s in sessions:
                    load_inputs(s, new)
            for s in sessions:
                s.poison()
            ref.run(graph=True)
            dev.run(graph=kind != "eager")
            c = compare_outputs(dev, cycle, outputs(ref, cycle))
            rows["epochs"].append({"kind": kind, "mismatches": c.per_rank, "elements": c.elements})
            rows["per_rank"] = [a + b for a, b in zip(rows["per_rank"], c.per_rank)]
            for op, n in c.by_op.items():
                rows["by_op"][op] = rows["by_op"].get(op, 0) + n
            rows["first"] = rows["first"] or c.first
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--epochs", type=int, default=3, help="graph epochs per corpus")
    ap.add_argument("--changed", type=int, default=2, help="changed epochs per corpus")
    ap.add_argument("--rows", type=int, default=5, help="draft rows T")
    ap.add_argument("--delete", choices=MOE_OPS, help="leave this MoE command out (the check must then fail where "
                                                      "the cycle has it)")
    ap.add_argument("--json", type=Path, help="write the per-corpus results here")
    args = ap.parse_args(argv)
    if args.epochs < 1 or args.changed < 0 or args.rows < 1:
        print("level_zero_moe_check: --epochs must be >= 1, --changed >= 0, --rows >= 1", file=sys.stderr)
        return 2
    from rich.console import Console
    from rich.table import Table

    try:
        from decoder_shell.drivers.level_zero import LevelZeroDriver
        driver = LevelZeroDriver(args.device)
        results = {}
        with tempfile.TemporaryDirectory(prefix="lz-moe-") as tmp:
            for weights, kind, combine in CASES:
                name = f"tiny-moe {weights} {kind} {combine}"
                g = preset("tiny-moe", tp=2, verify_rows=2, draft_rows=args.rows, draft_kind=kind, moe_weights=weights,
                           moe_combine=combine)
                corpus = synth(g, Path(tmp) / f"{weights}-{kind}-{combine}", seed=3)
                results[name] = check_case(driver, corpus, args.epochs, args.changed, args.delete)
    except ShellError as e:
        print(f"level_zero_moe_check: {e}", file=sys.stderr)
        return e.exit_code
    console = Console(width=max(Console().width, 120))
    console.print(f"driver   {driver.describe()}")
    table = Table(title="MoE cycles vs the cpu driver: elements whose bits differ")
    for col in ("corpus", "epochs exact", "rank 0", "rank 1"):
        table.add_column(col, justify="left" if col == "corpus" else "right", no_wrap=True, min_width=len(col))
    table.add_column("first mismatching output")  # the counts per op are in --json
    for name, r in results.items():
        exact = sum(not any(e["mismatches"]) for e in r["epochs"])
        table.add_row(name, f"{exact}/{len(r['epochs'])}", *(str(n) for n in r["per_rank"]), r["first"] or "-")
    console.print(table)
    bad = [n for n, r in results.items() if any(r["per_rank"])]
    if args.json:
        args.json.write_text(json.dumps({"device": driver.describe(), "results": results}, indent=1))
    print(f"MISMATCH: {', '.join(bad)}; first: {results[bad[0]]['first']}" if bad else
          f"EXACT: {len(results)} MoE corpora, every output of every rank, graph, eager and changed epochs")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
