"""On-device exactness check: every CUDA kernel against its numpy contract, many random cases.

The cases come from decoder_shell.replay.selfcheck: first the sweep (every mHC variant on every command
it fits at a few fixed geometries), then random ones (random geometries, ring contracts, kernel
variants, values over many magnitudes); each cycle runs as a CUDA graph and eagerly, and every output
element of every rank is compared bit-for-bit with the contracts. A deliberately inexact build (FMA
contraction) must be caught. A kernel that does not end stops the check within the driver's deadline
(DECODER_SHELL_DEADLINE_S) with one line naming the case, exit 4. Prints a table last.

    python tools/cuda_check.py --cases 200 [--seed 1] [--no-sweep] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoder_shell.commands.program import build_cycle, reference  # noqa: E402
from decoder_shell.contracts.allreduce import RingContract  # noqa: E402
from decoder_shell.corpus.synth import injected_values  # noqa: E402
from decoder_shell.drivers import get_driver  # noqa: E402
from decoder_shell.errors import ShellError  # noqa: E402
from decoder_shell.geometry import Geometry  # noqa: E402
from decoder_shell.replay.selfcheck import run_case, self_check, sweep_cases, variant_sweep  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-sweep", action="store_true", help="random cases only")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    try:
        return check(args)
    except ShellError as e:
        print(f"cuda_check: {e}", file=sys.stderr)
        return e.exit_code


def check(args) -> int:
    drv = get_driver("cuda", placement="emulated")
    t0 = time.time()

    def lines(part, total):  # one line a case on stderr: a cold kernel cache makes a case take seconds
        def case_done(case, n, bad):
            print(f"cuda_check: {part} case {case + 1}/{total}: {n:,} elements, {bad:,} mismatching, "
                  f"{time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        return case_done

    sweep = None if args.no_sweep else variant_sweep(drv, args.seed,
                                                     progress=lines("sweep", sum(1 for _ in sweep_cases())))
    summary = self_check(drv, args.cases, args.seed, progress=lines("random", args.cases))
    # the deliberately inexact build must be caught
    g = Geometry(preset="random", hidden=4096, layers=1, ranks=2, verify_rows=2, draft_rows=0)
    cyc = build_cycle(g, RingContract())
    values = injected_values(cyc, [args.seed, 99999])
    _, fma_bad = run_case(drv, cyc, values, {c.index: "fma" for c in cyc.commands if c.op != "allreduce"},
                          reference(cyc, values))
    dt = time.time() - t0
    summary.update(driver=drv.describe(), fma_variant_mismatches=dict(fma_bad), seconds=round(dt, 1))
    summary["failures"] = summary["failures"][:10]
    if sweep is not None:
        summary["sweep"] = {k: sweep[k] for k in ("cases", "elements_compared", "mismatching_elements",
                                                  "mismatches_by_op", "variants_used")}
        summary["sweep"]["failures"] = sweep["failures"][:10]
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    print("| check | value |\n|---|---|")
    for k in ("driver", "cases", "elements_compared", "mismatching_elements", "mismatches_by_op", "variants_used",
              "fma_variant_mismatches", "seconds"):
        print(f"| {k} | {summary[k]} |")
    if sweep is not None:
        for k in ("cases", "elements_compared", "mismatching_elements", "mismatches_by_op"):
            print(f"| sweep {k} | {sweep[k]} |")
    swept_bad = sweep["mismatching_elements"] if sweep is not None else 0
    return 0 if summary["mismatching_elements"] == 0 and swept_bad == 0 and sum(fma_bad.values()) > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
