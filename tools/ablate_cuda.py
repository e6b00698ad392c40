"""Where a CUDA replay cycle spends its time: the dsv4-flash TP4 cycle with one stage removed at a time.

Each row rebuilds the kernels with one ABL_* macro (tools only; those builds are never exact) or
deletes a class of commands, and reports the median slowest-rank ms per cycle next to the baseline
measured in the same run.

    python tools/ablate_cuda.py [--rows 2] [--epochs 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoder_shell.commands.program import build_cycle  # noqa: E402
from decoder_shell.contracts.allreduce import RingContract  # noqa: E402
from decoder_shell.corpus.synth import injected_values  # noqa: E402
from decoder_shell.drivers import get_driver  # noqa: E402
from decoder_shell.geometry import preset  # noqa: E402


def timed(drv, cyc, values, variants, epochs):
    with drv.load(cyc, variants) as s:
        for r in range(cyc.ranks):
            for bid, a in values[r].items():
                s.write(r, bid, a)
        for _ in range(10):
            s.run()
        return statistics.median(max(s.run()) for _ in range(epochs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=40)
    args = ap.parse_args()
    drv = get_driver("cuda", placement="emulated")
    plain = get_driver("cuda", placement="emulated", pdl=False)
    cyc = build_cycle(preset("dsv4-flash", tp=args.tp, verify_rows=args.rows, draft_rows=0), RingContract())
    values = injected_values(cyc, 3)
    mh = [c.index for c in cyc.commands if c.op != "allreduce"]
    ar = [c.index for c in cyc.commands if c.op == "allreduce"]
    fused = {i: "fused-allreduce-mhc" for i in mh}
    rows = [("baseline", "", {}), ("baseline, plain edges (no PDL)", "", {}, plain),
            ("sinkhorn-inline", "", {i: "sinkhorn-inline" for i in mh}), ("fused-allreduce-mhc", "", fused),
            ("delete all-reduces", "", {i: "delete" for i in ar}), ("delete mHC", "", {i: "delete" for i in mh}),
            ("all-reduce as empty kernels", "", {i: "empty" for i in ar}),
            ("mHC as empty kernels", "", {i: "empty" for i in mh})]
    for flag in ("ABL_NO_SINKHORN", "ABL_NO_COLLAPSE", "ABL_NO_MAIN"):
        rows.append((f"baseline -D{flag}", flag, {}))
    rows.append(("sinkhorn-inline -DABL_NO_SINKHORN", "ABL_NO_SINKHORN", {i: "sinkhorn-inline" for i in mh}))
    out = []
    for name, flag, v, *d in rows:
        os.environ["DECODER_SHELL_CUDA_DEFINES"] = flag
        out.append((name, timed(d[0] if d else drv, cyc, values, v, args.epochs)))
        print(f"{name}: {out[-1][1]:.3f}", flush=True)
    print(f"\n{drv.describe()} dsv4-flash TP{args.tp} M={args.rows}: ms per cycle, slowest rank (median)")
    print("| variant | ms | vs baseline |\n|---|---|---|")
    for name, ms in out:
        print(f"| {name} | {ms:.3f} | {ms - out[0][1]:+.3f} |")


if __name__ == "__main__":
    main()
