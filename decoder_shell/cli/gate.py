"""`shell gate` and `shell report`: registered into the main parser by cli._extensions (argparse and console rendering: the CLI room)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..corpus import CORPUS_HELP
from ..drivers import PLACEMENTS
from ..errors import UsageError


def register(sub) -> None:
    s = sub.add_parser("gate", help="measure a candidate (or a deletion bound) against the baseline in the full cycle",
                       description="Run baseline and candidate interleaved over the same buffers; PASS (exit 0) only "
                                   "if the candidate is bit-exact and its conservative saving reaches the threshold.")
    s.add_argument("corpus", nargs="?", type=Path, help=CORPUS_HELP)
    s.add_argument("--candidate", action="append", default=[], metavar="OP=IMPL",
                   help="replace the commands OP selects by IMPL: a driver variant name or @spec.json (repeatable)")
    s.add_argument("--delete", action="append", default=[], metavar="OP",
                   help="deletion-only upper bound: replace the commands OP selects by nothing (repeatable)")
    s.add_argument("--delete-mode", default="delete", choices=("delete", "copy"),
                   help="delete: run nothing; copy: write the expected output instead (default delete)")
    s.add_argument("--threshold-ms", type=float, default=0.50, help="saving needed to PASS, ms/cycle (default 0.50)")
    s.add_argument("--reps", type=int, default=3, help="repetitions: blocks of --epochs per side (default 3)")
    s.add_argument("--epochs", type=int, default=70, help="graph epochs per repetition (default 70)")
    s.add_argument("--changed", type=int, default=16, help="changed eager epochs per side (default 16)")
    s.add_argument("--settle", type=int, default=3, help="untimed epochs per side before the timed ones (default 3)")
    s.add_argument("--seed", type=int, default=0, help="seed of the changed epochs' inputs")
    s.add_argument("--driver", default="auto", help="auto | cpu | cuda | level-zero")
    s.add_argument("--placement", default="auto", choices=PLACEMENTS,
                   help="cuda: ranks emulated on one GPU, or one process per rank")
    s.add_argument("--json", action="store_true", help="print the verdict as JSON instead of the tables")
    s.add_argument("--out", type=Path, help="write the JSON verdict here")
    s.add_argument("--plot", type=Path, help="write a PNG of per-epoch, per-rank cycle times")
    s.add_argument("--csv", type=Path, help="write every epoch's per-rank times of both sides as CSV here")
    s.add_argument("--list-candidates", action="store_true", help="list the variants the driver offers and exit")
    s.set_defaults(func=cmd_gate)

    if "report" not in sub.choices:
        r = sub.add_parser("report", help="re-render a saved gate verdict or replay result (table, plot, CSV)")
        r.add_argument("verdict", type=Path, metavar="result",
                       help="a JSON file written by `shell gate --out` or `shell replay --json-out`")
        r.add_argument("--plot", type=Path, help="write a PNG of per-epoch, per-rank cycle times")
        r.add_argument("--csv", type=Path, help="write every epoch's per-rank times as CSV here")
        r.add_argument("--json", action="store_true", help="print the verdict JSON instead of the tables")
        r.set_defaults(func=cmd_report)


def cmd_gate(args: argparse.Namespace, console: Console) -> int:
    from ..drivers import get_driver
    if args.list_candidates:
        return list_candidates(get_driver(args.driver), args.json, console)
    from ..corpus.store import Corpus
    from ..replay.candidates import make_plan
    from ..replay.engine import prepare
    from ..replay.gate import GateSettings, run_gate
    from ..replay.verdict import exit_code, save_verdict

    settings = GateSettings(reps=args.reps, epochs=args.epochs, changed=args.changed, settle=args.settle,
                            seed=args.seed, threshold_ms=args.threshold_ms)
    if not args.candidate and not args.delete:
        raise UsageError("nothing to gate: give --candidate OP=IMPL or --delete OP (see --list-candidates)")
    corpus = Corpus.open(Path(args.corpus))
    from ..corpus.budget import require_memory
    require_memory(corpus, "gate")
    t = getattr(args, "tracker", None)
    if t is None:  # called without the CLI's main (no progress display)
        from ..progress import Tracker
        t = Tracker(console, quiet=True)
    t.expect("bind", len(corpus.geometry.boundaries()), "gate: reading the corpus")
    with t:
        cycle, bound = prepare(corpus, t.hook("bind"))
    plan = make_plan(cycle, args.candidate, args.delete, args.delete_mode)
    driver = get_driver(args.driver, placement=args.placement)
    t.expect("block", 2 * settings.reps, f"gate: blocks of {settings.epochs} graph epochs")
    t.expect("changed", settings.changed, "gate: changed eager epochs (both sides)")
    with t:
        v = run_gate(corpus, driver, plan, cycle, bound, settings, progress=t)
    if args.out:
        save_verdict(v, args.out)
    show(v, args.json, args.plot, console)
    if args.csv:
        from ..replay.results import write_csv
        write_csv(v, args.csv)
    return exit_code(v)


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    from ..replay.results import load_result, write_csv
    from ..replay.verdict import exit_code, load_verdict
    raw = load_result(args.verdict)
    if raw.get("format") == "decoder-shell-replay":
        return _report_replay(raw, args, console)
    v = load_verdict(args.verdict)
    try:
        show(v, args.json, args.plot, console)
        if args.csv:
            write_csv(v, args.csv)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as e:
        raise UsageError(f"{args.verdict}: malformed verdict ({type(e).__name__}: {e})") from None
    return exit_code(v)


def _report_replay(raw: dict, args: argparse.Namespace, console: Console) -> int:
    """A saved replay result: its tables (and breakdown), plot and CSV; exit 1 if it was not exact."""
    from ..replay.engine import ReplayResult
    from .render_replay import plot_replay, render_replay
    from ..replay.results import write_csv
    try:
        result = ReplayResult.from_json(raw)
        if args.json:
            print(json.dumps(raw, indent=1, sort_keys=True))
        else:
            render_replay(result, console)
            if result.breakdown:
                from .render_breakdown import render_breakdown
                render_breakdown(result.breakdown, console)
        if args.plot:
            plot_replay(result, args.plot)
        if args.csv:
            write_csv(raw, args.csv)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as e:
        raise UsageError(f"{args.verdict}: malformed replay result ({type(e).__name__}: {e})") from None
    except OSError as e:
        raise UsageError(f"cannot write {e.filename}: {e.strerror or e}") from None
    return 0 if result.exact else 1


def show(v: dict, as_json: bool, plot: Path | None, console: Console) -> None:
    from .render_gate import plot_gate, render_gate
    if as_json:
        print(json.dumps(v, indent=1, sort_keys=True))
    else:
        render_gate(v, console)
    if plot:
        try:
            plot_gate(v, plot)
        except OSError as e:
            raise UsageError(f"cannot write plot {plot}: {e.strerror or e}") from None


def list_candidates(driver, as_json: bool, console: Console) -> int:
    """What the driver offers: `available_variants() -> {name: description}` where it exposes one."""
    offer = getattr(driver, "available_variants", None)
    variants = dict(offer()) if offer else {}
    if as_json:
        print(json.dumps({"driver": driver.describe(), "variants": variants}, indent=1, sort_keys=True))
        return 0
    if not offer:
        console.print(f"{driver.describe()} does not list its variants; any name is passed to it as is",
                      markup=False)
        return 0
    t = Table(title=f"candidates offered by {driver.describe()} (use --candidate OP=NAME; "
                    f"or OP=@spec.json for your own kernel)")
    t.add_column("name")
    t.add_column("what it does")
    for name, desc in variants.items():
        t.add_row(escape(name), escape(desc))
    console.print(t)
    return 0
