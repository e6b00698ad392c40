"""`shell`: the command line. Errors become one line on stderr and an exit code, never a traceback."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from pathlib import Path

from rich.console import Console

from ..atomic import write_atomic
from ..corpus import CORPUS_HELP, SHIPPED_CORPUS, default_corpus
from ..drivers import PLACEMENTS
from ..errors import MismatchError, ShellError, UsageError

EXIT_CODES = """exit codes:
  0  success (gate: PASS)
  1  a mismatching element, a FAIL verdict, or a capture that did not complete
  2  bad usage or input: one line on stderr naming the file and the reason
  3  a driver or device that is not available here
  4  a kernel failed to build, load or run on a driver that is present
  5  gate: UNTIMED (exact, but the driver's times do not measure speed)"""


#: The extra that provides a module a command needs, for the one-line hint when it is missing.
# The extra that brings a missing module; the reference service needs transformers beside torch, so a
# missing torch there names the `reference` extra (which holds both), elsewhere the torch-only `capture`.
EXTRAS = {"torch": "capture", "transformers": "reference", "cuda": "cuda", "dpctl": "intel"}
EXTRAS_OF_COMMAND = {"serve-reference": {"torch": "reference"}}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option shows its default, unless its help already says it (or it has none to show)."""

    def _get_help_string(self, action):
        text = action.help or ""
        d = action.default
        if "default" in text or d is None or d is False or d is argparse.SUPPRESS or d == []:
            return text
        return super()._get_help_string(action)


class TopHelpFormatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """The top-level help: defaults shown, and the epilog's exit-code table kept as written."""


class Parser(argparse.ArgumentParser):
    """Every (sub)parser shows defaults in --help."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


class VersionAction(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from ..about import version_text
        from ..drivers import probe
        print(version_text(probe()))
        parser.exit(0)


def add_geometry_args(p: argparse.ArgumentParser) -> None:
    from ..geometry import DRAFT_KINDS, PRESETS, REDUCE_DTYPES
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS), help="model geometry (default tiny)")
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel ranks R (default 2)")
    p.add_argument("--verify-rows", type=int, default=2, help="rows M of the verify phase (default 2)")
    p.add_argument("--draft-rows", type=int, default=1, help="rows of the draft phase; 0 for none (default 1)")
    p.add_argument("--draft-kind", default="mtp1", choices=sorted(DRAFT_KINDS), help="draft model shape")
    p.add_argument("--reduce-dtype", default="bfloat16", choices=REDUCE_DTYPES, help="all-reduce dtype")
    p.add_argument("--fused-norm", action="store_true",
                   help="hc_pre's layer input is RMSNorm(collapse) * norm_weight, as vLLM computes it")
    p.add_argument("--moe-weights", default=None, choices=("packed", "expanded"),
                   help="MoE presets: expert weights as official codes + scales or decoded bf16 (default packed)")
    p.add_argument("--moe-combine", default=None, choices=("official", "fused"),
                   help="MoE presets: exact-official combine (per-slot fp32 all-reduce, bf16 per expert in "
                        "ascending id; the default) or fused (one fp32 all-reduce, one rounding; docs/MOE.md)")


def geometry_from(args):
    from ..geometry import preset
    return preset(args.preset, tp=args.tp, verify_rows=args.verify_rows, draft_rows=args.draft_rows,
                  draft_kind=args.draft_kind, reduce_dtype=args.reduce_dtype,
                  moe_weights=getattr(args, "moe_weights", None), fused_norm=getattr(args, "fused_norm", False),
                  moe_combine=getattr(args, "moe_combine", None))


def open_corpus(path, require_seal: bool = True):
    from ..corpus.store import Corpus
    return Corpus.open(Path(path), require_seal)


def check_memory(corpus, what: str) -> None:
    """Refuse (one line) a replay or verify that needs more memory than the host has available."""
    from ..corpus.budget import require_memory
    require_memory(corpus, what)


def emit_json(obj, out: Path | None = None) -> None:
    text = json.dumps(obj, indent=1, sort_keys=True, default=str)
    if out:
        try:
            write_atomic(Path(out), (text + "\n").encode())
        except OSError as e:
            raise UsageError(f"cannot write {out}: {e.strerror or e}") from None
    else:
        print(text)


# --- synth -------------------------------------------------------------------------------------
def cmd_synth(args, console: Console) -> int:
    from ..commands.program import build_cycle
    from ..contracts.allreduce import RingContract
    from ..corpus.synth import synth
    g = geometry_from(args)
    commands = len(build_cycle(g, RingContract()).commands)
    with args.tracker.expect("write", commands, "synth: writing boundaries") as t:
        c = synth(g, Path(args.out), seed=args.seed, progress=t.hook("write"), replace=args.replace)
    n = c.info.counts
    recipes = f", {n['recipe_tensors']} recipe tensors ({n['recipe_bytes'] / 2**20:.1f} MiB)" if n.get("recipe_tensors") else ""
    console.print(f"wrote {args.out}: {n['manifests']} manifests, {n['blobs']} blobs, "
                  f"{n['referenced_bytes'] / 2**20:.1f} MiB referenced, {n['stored_bytes'] / 2**20:.1f} MiB stored{recipes}")
    return 0


# --- verify ------------------------------------------------------------------------------------
def cmd_verify(args, console: Console) -> int:
    from ..corpus.publish import locked
    from ..corpus.verify import record_parity, verify
    with locked(Path(args.corpus)) if args.record else nullcontext():
        c = open_corpus(args.corpus, require_seal=False)
        check_memory(c, "verify")
        n = len(c.geometry.boundaries())
        t = args.tracker.expect("bind", n, "verify: reading and checking blobs")
        t.expect("parity", n, "verify: recomputing every op from its captured inputs")
        inference = None
        if args.infer:
            from ..corpus.infer import infer_corpus
            status = t.bar.console.status("inferring the collective contract") if t.enabled else nullcontext()
            with status:
                inference = infer_corpus(c)
            if args.record and inference.found:
                c.info.collective = inference.collective(c.info.contract())
        with t:
            rep = verify(c, t.hook("bind"), t.hook("parity"))
        rep["sealed"] = c.sealed
        if inference is not None:
            rep["inference"] = inference.to_json()
        if args.record:
            record_parity(c, rep)
    from ..replay.results import RESULT_SCHEMA, run_block
    rep = {"format": "decoder-shell-verify", "schema": RESULT_SCHEMA, "run": run_block("verify", c), **rep}
    if args.json:
        emit_json(rep)
    else:
        from .render_verify import render_verify
        render_verify(rep, console)
        if inference is not None:
            console.print(f"inferred collective contract: {inference.describe()}")
            if len(inference.consistent) > 1:
                for alt in inference.consistent:
                    console.print(f"  consistent: {alt['contract'].describe()}")
        if not c.sealed:
            console.print(f"corpus.json carries no digest (an older shell wrote it): replay refuses it until "
                          f"`shell verify {args.corpus} --record` seals it")
    return 0 if rep["ok"] and (inference is None or inference.found) else 1


# --- inspect -----------------------------------------------------------------------------------
def cmd_inspect(args, console: Console) -> int:
    from ..corpus.inspect import inspect
    corpus = open_corpus(args.corpus)
    rep = inspect(corpus)
    if args.memory:
        from ..replay.memory import corpus_memory
        rep["memory"] = corpus_memory(corpus)
    if args.json:
        emit_json(rep)
        return 0
    console.print(f"corpus {rep['corpus']}: {rep['geometry']['preset']} TP{rep['geometry']['ranks']}, "
                  f"contract {rep['contract']}, rebased={rep['rebased']}")
    console.print(f"manifests {rep['manifests']} ({', '.join(f'{k} {v}' for k, v in rep['manifests_per_op'].items())})")
    console.print(f"tensor references {rep['tensor_refs']}, unique blobs {rep['unique_blobs']} "
                  f"(missing {rep['missing_blobs']}, unreferenced {rep['unreferenced_blobs']})")
    console.print(f"MiB referenced {rep['referenced_bytes'] / 2**20:.2f}, unique {rep['unique_bytes'] / 2**20:.2f}, "
                  f"stored {rep['stored_bytes'] / 2**20:.2f} (--json gives bytes)")
    console.print(f"dedup ratio {rep['dedup_ratio']:.2f}x, compression {rep['compression_ratio']:.2f}x")
    if args.memory:
        from .render_memory import render_memory
        render_memory(rep["memory"], console)
    return 0


# --- replay ------------------------------------------------------------------------------------
def cmd_replay(args, console: Console) -> int:
    from ..drivers import get_driver
    from ..replay.engine import replay
    from .render_replay import plot_replay, render_replay
    from ..replay.results import write_csv
    if args.epochs < 1 or args.changed < 0 or args.settle < 0:
        raise UsageError("--epochs must be >= 1, --changed and --settle >= 0")
    corpus = open_corpus(args.corpus)
    check_memory(corpus, "replay")
    cycle_form = "graph" if args.cycle == "auto" and args.breakdown else args.cycle  # (node by node: the graph)
    driver = get_driver(args.driver, placement=args.placement, cycle=cycle_form)
    t = args.tracker.expect("bind", len(corpus.geometry.boundaries()), "replay: reading the corpus")
    t.expect("graph", args.settle + args.epochs, "replay: graph epochs")
    t.expect("changed", args.changed, "replay: changed epochs")
    with t:
        result = replay(corpus, driver, epochs=args.epochs, changed=args.changed, settle=args.settle,
                        seed=args.seed, progress=t, breakdown=args.breakdown)
    if args.json:
        emit_json(result.to_json(), args.json_out)
    if not args.json or args.json_out:
        render_replay(result, console)
        if result.breakdown:
            from .render_breakdown import render_breakdown
            render_breakdown(result.breakdown, console, commands=args.verbose)
    if args.csv:
        write_csv(result.to_json(), args.csv)
    if args.plot:
        plot_replay(result, args.plot)
    if not result.exact:
        raise MismatchError("replay is not exact (see the mismatch counts above)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    import textwrap
    default_corpus = textwrap.fill("Commands that read a corpus default to ./corpus when the current folder holds "
                                   f"one, else to the tiny corpus shipped in the package: {SHIPPED_CORPUS}", 100)
    p = Parser(prog="shell", description="Capture and replay one TP speculative decode cycle, bit-exact.",
               epilog=f"{default_corpus}\n\n{EXIT_CODES}", formatter_class=TopHelpFormatter)
    p.add_argument("--version", action=VersionAction, help="version, commit and the drivers available here")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    s = sub.add_parser("synth", help="build a linked synthetic corpus whose outputs come from the contracts")
    add_geometry_args(s)
    s.add_argument("--seed", type=int, default=0, help="seed of the synthetic inputs and params")
    s.add_argument("--out", required=True, help="corpus folder to create (new or empty)")
    s.add_argument("--replace", action="store_true",
                   help="replace the corpus in --out: the new one is swapped in atomically once complete")
    s.set_defaults(func=cmd_synth)

    s = sub.add_parser("verify", help="check integrity, links, cross-rank exactness and contract parity")
    s.add_argument("corpus", nargs="?", type=Path, help=CORPUS_HELP)
    s.add_argument("--json", action="store_true")
    s.add_argument("--record", action="store_true", help="write the measured parity into corpus.json (rebase if inexact)")
    s.add_argument("--infer", action="store_true",
                   help="infer the collective contract from the captured all-reduces (with --record: store it)")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("inspect", help="manifests, unique blobs, bytes and dedup ratio")
    s.add_argument("corpus", nargs="?", type=Path, help=CORPUS_HELP)
    s.add_argument("--json", action="store_true")
    s.add_argument("--memory", action="store_true",
                   help="the device memory per rank: weights per part and stage (as stored and bf16-expanded), "
                        "activations and the cuda driver's arenas")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("replay", help="replay the cycle epoch after epoch and prove every output bit-exact")
    s.add_argument("corpus", nargs="?", type=Path, help=CORPUS_HELP)
    s.add_argument("--epochs", type=int, default=70, help="timed graph epochs")
    s.add_argument("--changed", type=int, default=0, help="changed epochs: new inputs, expected from the contracts")
    s.add_argument("--settle", type=int, default=3, help="untimed epochs before the timed ones")
    s.add_argument("--driver", default="auto", help="auto | cpu | cuda | level-zero")
    s.add_argument("--placement", default="auto", choices=PLACEMENTS,
                   help="cuda: ranks emulated on one GPU, or one process per rank (auto: processes when "
                        "there is a GPU per rank)")
    s.add_argument("--cycle", default="auto", choices=("auto", "graph", "persistent", "persistent-flags", "persistent-cluster"),
                   help="cuda: the cycle as a graph of kernel nodes, or as one persistent cooperative kernel "
                        "(its steps separated by grid barriers, or ordered by row counters), or as one kernel of "
                        "16-block clusters, one per rank and row group (docs/CUDA.md); auto (default): the "
                        "cluster kernel where it is faster than the graph (at most 8 rows "
                        "a step, emulated ranks, sm_90+), else the graph; --breakdown always times the graph")
    s.add_argument("--seed", type=int, default=0, help="seed of the changed epochs' inputs")
    s.add_argument("--json", action="store_true", help="print the full result as JSON")
    s.add_argument("--json-out", type=Path, help="write the JSON result here (the table still prints)")
    s.add_argument("--csv", type=Path, help="write every epoch's per-rank times as CSV here")
    s.add_argument("--plot", type=Path, help="write a PNG of per-epoch, per-rank cycle times")
    s.add_argument("--breakdown", action="store_true",
                   help="time one more epoch node by node: time per command, per op kind and per phase, and "
                        "each all-reduce's size, algbw and busbw (with -v: every node)")
    s.set_defaults(func=cmd_replay)

    for register in _extensions():
        register(sub)
    for s in sub.choices.values():
        g = s.add_mutually_exclusive_group()
        g.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
        g.add_argument("-v", "--verbose", action="store_true", help="one detail line per step (and per epoch) on stderr")
    return p


def _extensions():
    """Subcommands that live with their subsystem (gate, capture, serve-reference, report)."""
    from . import capture, gate
    return [gate.register, capture.register]


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if "corpus" in args and args.corpus is None:
        args.corpus = default_corpus()
    if getattr(args, "json_out", None):
        args.json = True
    console = Console(highlight=False, soft_wrap=True)
    from ..progress import Tracker
    args.tracker = Tracker(console, quiet=args.quiet, verbose=args.verbose)
    try:
        return args.func(args, console)
    except ShellError as e:
        print(f"shell {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top not in EXTRAS:
            raise
        extra = EXTRAS_OF_COMMAND.get(args.command, {}).get(top, EXTRAS[top])
        print(f"shell {args.command}: needs {top}, which is not installed here: "
              f"pip install 'decoder-shell[{extra}]'", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("shell: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, MemoryError, RecursionError) as e:
        print(f"shell {args.command}: {boundary_message(e)}", file=sys.stderr)
        return 2


def boundary_message(e: BaseException) -> str:
    """One line for an error no subsystem turned into a ShellError: the path (when known) and the reason."""
    if isinstance(e, OSError):
        where = " -> ".join(str(f) for f in (e.filename, e.filename2) if f is not None)
        reason = e.strerror or str(e)
        return f"{where}: {reason}" if where else reason
    if isinstance(e, MemoryError):
        return "out of memory (the input asks for more memory than this host can give)"
    if isinstance(e, RecursionError):
        return "input is nested too deeply"
    return " ".join(str(e).split())[:300] or type(e).__name__

