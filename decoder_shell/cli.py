"""`shell`: the command line. Errors become one line on stderr and an exit code, never a traceback."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from .atomic import write_atomic
from .corpus import DEFAULT_CORPUS
from .drivers import PLACEMENTS
from .errors import MismatchError, ShellError, UsageError

EXIT_CODES = """exit codes:
  0  success (gate: PASS)
  1  a mismatching element, a FAIL verdict, or a capture that did not complete
  2  bad usage or input: one line on stderr naming the file and the reason
  3  a driver or device that is not available here
  4  a kernel failed to build, load or run on a driver that is present
  5  gate: UNTIMED (exact, but the driver's times do not measure speed)"""


def add_geometry_args(p: argparse.ArgumentParser) -> None:
    from .geometry import DRAFT_KINDS, PRESETS, REDUCE_DTYPES
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS), help="model geometry (default tiny)")
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel ranks R (default 2)")
    p.add_argument("--verify-rows", type=int, default=2, help="rows M of the verify phase (default 2)")
    p.add_argument("--draft-rows", type=int, default=1, help="rows of the draft phase; 0 for none (default 1)")
    p.add_argument("--draft-kind", default="mtp1", choices=sorted(DRAFT_KINDS), help="draft model shape")
    p.add_argument("--reduce-dtype", default="bfloat16", choices=REDUCE_DTYPES, help="all-reduce dtype")


def geometry_from(args):
    from .geometry import preset
    return preset(args.preset, tp=args.tp, verify_rows=args.verify_rows, draft_rows=args.draft_rows,
                  draft_kind=args.draft_kind, reduce_dtype=args.reduce_dtype)


def open_corpus(path, require_seal: bool = True):
    from .corpus.store import Corpus
    return Corpus.open(Path(path), require_seal)


def check_memory(corpus, what: str) -> None:
    """Refuse (one line) a replay or verify that needs more memory than the host has available."""
    from .corpus.budget import require_memory
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
    from .corpus.synth import synth
    g = geometry_from(args)
    c = synth(g, Path(args.out), seed=args.seed, replace=args.replace)
    n = c.info.counts
    console.print(f"wrote {args.out}: {n['manifests']} manifests, {n['blobs']} blobs, "
                  f"{n['referenced_bytes'] / 2**20:.1f} MiB referenced, {n['stored_bytes'] / 2**20:.1f} MiB stored")
    return 0


# --- verify ------------------------------------------------------------------------------------
def cmd_verify(args, console: Console) -> int:
    from contextlib import nullcontext

    from .corpus.publish import locked
    from .corpus.verify import record_parity, verify
    with locked(Path(args.corpus)) if args.record else nullcontext():
        c = open_corpus(args.corpus, require_seal=False)
        check_memory(c, "verify")
        inference = None
        if args.infer:
            from .corpus.infer import infer_corpus
            inference = infer_corpus(c)
            if args.record and inference.found:
                c.info.collective = {"contract": inference.contract.to_json(), "how": "inferred",
                                     "inference": inference.to_json()}
        rep = verify(c)
        rep["sealed"] = c.sealed
        if inference is not None:
            rep["inference"] = inference.to_json()
        if args.record:
            record_parity(c, rep)
    if args.json:
        emit_json(rep)
    else:
        from .replay.report_verify import render_verify
        render_verify(rep, console)
        if inference is not None:
            console.print(f"inferred collective contract: {inference.describe()}")
        if not c.sealed:
            console.print(f"corpus.json carries no digest (an older shell wrote it): replay refuses it until "
                          f"`shell verify {args.corpus} --record` seals it")
    return 0 if rep["ok"] and (inference is None or inference.found) else 1


# --- inspect -----------------------------------------------------------------------------------
def cmd_inspect(args, console: Console) -> int:
    from .corpus.inspect import inspect
    rep = inspect(open_corpus(args.corpus))
    if args.json:
        emit_json(rep)
        return 0
    console.print(f"corpus {rep['corpus']}: {rep['geometry']['preset']} TP{rep['geometry']['ranks']}, "
                  f"contract {rep['contract']}, rebased={rep['rebased']}")
    console.print(f"manifests {rep['manifests']} ({', '.join(f'{k} {v}' for k, v in rep['manifests_per_op'].items())})")
    console.print(f"tensor references {rep['tensor_refs']}, unique blobs {rep['unique_blobs']} "
                  f"(missing {rep['missing_blobs']}, unreferenced {rep['unreferenced_blobs']})")
    console.print(f"raw bytes referenced {rep['referenced_bytes']:,}, unique {rep['unique_bytes']:,}, "
                  f"stored {rep['stored_bytes']:,}")
    console.print(f"dedup ratio {rep['dedup_ratio']:.2f}x, compression {rep['compression_ratio']:.2f}x")
    return 0


# --- replay ------------------------------------------------------------------------------------
def cmd_replay(args, console: Console) -> int:
    from .drivers import get_driver
    from .replay.engine import replay
    from .replay.report import plot_epochs, render_replay
    if args.epochs < 1 or args.changed < 0 or args.settle < 0:
        raise UsageError("--epochs must be >= 1, --changed and --settle >= 0")
    corpus = open_corpus(args.corpus)
    check_memory(corpus, "replay")
    driver = get_driver(args.driver, placement=args.placement)
    result = replay(corpus, driver, epochs=args.epochs, changed=args.changed, settle=args.settle, seed=args.seed)
    if args.json:
        emit_json(result.to_json(), args.json_out)
    if not args.json or args.json_out:
        render_replay(result, console)
    if args.plot:
        plot_epochs({"replay": result.of("graph")}, Path(args.plot), f"{corpus.root} on {driver.describe()}")
    if not result.exact:
        raise MismatchError("replay is not exact (see the mismatch counts above)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shell", description="Capture and replay one TP speculative decode cycle, bit-exact.",
                                epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("synth", help="build a linked synthetic corpus whose outputs come from the contracts")
    add_geometry_args(s)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", required=True, help="corpus folder to create (new or empty)")
    s.add_argument("--replace", action="store_true",
                   help="replace the corpus in --out: the new one is swapped in atomically once complete")
    s.set_defaults(func=cmd_synth)

    s = sub.add_parser("verify", help="check integrity, links, cross-rank exactness and contract parity")
    s.add_argument("corpus", nargs="?", default=DEFAULT_CORPUS)
    s.add_argument("--json", action="store_true")
    s.add_argument("--record", action="store_true", help="write the measured parity into corpus.json (rebase if inexact)")
    s.add_argument("--infer", action="store_true",
                   help="infer the collective contract from the captured all-reduces (with --record: store it)")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("inspect", help="manifests, unique blobs, bytes and dedup ratio")
    s.add_argument("corpus", nargs="?", default=DEFAULT_CORPUS)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("replay", help="replay the cycle epoch after epoch and prove every output bit-exact")
    s.add_argument("corpus", nargs="?", default=DEFAULT_CORPUS)
    s.add_argument("--epochs", type=int, default=70)
    s.add_argument("--changed", type=int, default=0, help="changed epochs: new inputs, expected from the contracts")
    s.add_argument("--settle", type=int, default=3, help="untimed epochs before the timed ones")
    s.add_argument("--driver", default="auto", help="auto | cpu | cuda | level-zero")
    s.add_argument("--placement", default="auto", choices=PLACEMENTS,
                   help="cuda: ranks emulated on one GPU, or one process per rank (auto: processes when "
                        "there is a GPU per rank)")
    s.add_argument("--seed", type=int, default=0, help="seed of the changed epochs' inputs")
    s.add_argument("--json", action="store_true", help="print the full result as JSON")
    s.add_argument("--json-out", type=Path, help="write the JSON result here (the table still prints)")
    s.add_argument("--plot", type=Path, help="write a PNG of per-epoch, per-rank cycle times")
    s.set_defaults(func=cmd_replay)

    for register in _extensions():
        register(sub)
    return p


def _extensions():
    """Subcommands that live with their subsystem (gate, capture, serve-reference, report)."""
    from .capture import cli as capture_cli
    from .replay import gate_cli
    return [gate_cli.register, capture_cli.register]


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "json_out", None):
        args.json = True
    console = Console(highlight=False, soft_wrap=True)
    try:
        return args.func(args, console)
    except ShellError as e:
        print(f"shell {args.command}: {e}", file=sys.stderr)
        return e.exit_code
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


if __name__ == "__main__":
    sys.exit(main())
