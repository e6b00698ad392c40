"""Launches the cluster cycle on a dsv4-flash verify cycle a few times, for Nsight Compute to sample one
launch: `ncu -k regex:cluster_q --launch-skip 2 --launch-count 1 python3 tools/cluster_ncu.py [--rows 2]`.
The stall reasons per SASS instruction (ncu --page source) say where the step's time goes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoder_shell.commands.program import build_cycle  # noqa: E402
from decoder_shell.contracts.allreduce import RingContract  # noqa: E402
from decoder_shell.corpus.synth import injected_values  # noqa: E402
from decoder_shell.drivers import get_driver  # noqa: E402
from decoder_shell.drivers.cuda.cluster_cycle import ClusterSession  # noqa: E402
from decoder_shell.geometry import preset  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--launches", type=int, default=4)
    args = ap.parse_args()
    drv = get_driver("cuda", placement="emulated")
    cyc = build_cycle(preset("dsv4-flash", tp=args.tp, verify_rows=args.rows, draft_rows=0), RingContract())
    values = injected_values(cyc, [7, args.rows])
    with ClusterSession(drv, cyc) as s:
        for r in range(cyc.ranks):
            for bid, a in values[r].items():
                s.write(r, bid, a)
        for _ in range(args.launches):
            print(f"{s.launch():.3f} ms", flush=True)


if __name__ == "__main__":
    main()
