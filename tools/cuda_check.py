"""On-device exactness check: every CUDA kernel against its numpy contract, many random cases.

The cases come from decoder_shell.replay.selfcheck (random geometries, ring contracts, kernel variants,
values over many magnitudes); each cycle runs as a CUDA graph and eagerly, and every output element
of every rank is compared bit-for-bit with the contracts. A deliberately inexact build (FMA
contraction) must be caught. Prints a table last.

    python tools/cuda_check.py --cases 200 [--seed 1] [--json out.json]
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
from decoder_shell.geometry import Geometry  # noqa: E402
from decoder_shell.replay.selfcheck import run_case, self_check  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    drv = get_driver("cuda", placement="emulated")
    t0 = time.time()
    def case_done(case, n, bad):  # one line a case on stderr: a cold kernel cache makes a case take seconds
        print(f"cuda_check: case {case + 1}/{args.cases}: {n:,} elements, {bad:,} mismatching, "
              f"{time.time() - t0:.0f} s", file=sys.stderr, flush=True)

    summary = self_check(drv, args.cases, args.seed, progress=case_done)
    # the deliberately inexact build must be caught
    g = Geometry(preset="random", hidden=4096, layers=1, ranks=2, verify_rows=2, draft_rows=0)
    cyc = build_cycle(g, RingContract())
    values = injected_values(cyc, [args.seed, 99999])
    _, fma_bad = run_case(drv, cyc, values, {c.index: "fma" for c in cyc.commands if c.op != "allreduce"},
                          reference(cyc, values))
    dt = time.time() - t0
    summary.update(driver=drv.describe(), fma_variant_mismatches=dict(fma_bad), seconds=round(dt, 1))
    summary["failures"] = summary["failures"][:10]
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    print("| check | value |\n|---|---|")
    for k in ("driver", "cases", "elements_compared", "mismatching_elements", "mismatches_by_op", "variants_used",
              "fma_variant_mismatches", "seconds"):
        print(f"| {k} | {summary[k]} |")
    return 0 if summary["mismatching_elements"] == 0 and sum(fma_bad.values()) > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
