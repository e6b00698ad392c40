"""Where the persistent cycle's time goes: per step (one mHC boundary with its all-reduce) against the
HBM time of that step's projection weights and the measured cost of one grid barrier.

Per step: %globaltimer stamps that block 0 takes as each step begins (barrier wait included; median
over traced launches); HBM time: the step's weight bytes (every rank) at the bandwidth measured here
(one device-to-device copy of 1 GiB, read + write bytes); barrier: the same grid doing only its
barriers, per barrier. dsv4-flash geometry, TP ranks emulated on one GPU, verify only.

    python tools/persistent_profile.py [--rows 2 8] [--tp 4] [--launches 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoder_shell.commands.program import build_cycle  # noqa: E402
from decoder_shell.contracts.allreduce import RingContract  # noqa: E402
from decoder_shell.corpus.synth import injected_values  # noqa: E402
from decoder_shell.drivers import get_driver  # noqa: E402
from decoder_shell.drivers.cuda.steps import weight_bytes  # noqa: E402
from decoder_shell.geometry import preset  # noqa: E402


def hbm_bandwidth(s, nbytes: int = 1 << 30) -> float:
    """Bytes per ms of one device-to-device copy (read + write counted), median of 5."""
    cu = s.cu
    a, b = cu.cuMemAlloc(nbytes), cu.cuMemAlloc(nbytes)
    try:
        times = []
        for _ in range(6):
            cu.cuEventRecord(s.ev_a, s.stream)
            cu.cuMemcpyDtoDAsync(b, a, nbytes, s.stream)
            cu.cuEventRecord(s.ev_b, s.stream)
            cu.cuStreamSynchronize(s.stream)
            times.append(float(cu.cuEventElapsedTime(s.ev_a, s.ev_b)))
        return 2 * nbytes / statistics.median(times[1:])
    finally:
        cu.cuMemFree(a)
        cu.cuMemFree(b)


def profile(m: int, tp: int = 4, launches: int = 20, cycle: str = "persistent") -> dict:
    drv = get_driver("cuda", placement="emulated", cycle=cycle)
    cyc = build_cycle(preset("dsv4-flash", tp=tp, verify_rows=m, draft_rows=0), RingContract())
    values = injected_values(cyc, [7, m])
    with drv.load(cyc) as s:
        for r in range(cyc.ranks):
            for bid, a in values[r].items():
                s.write(r, bid, a)
        for _ in range(5):
            s.run()
        cycle_ms = statistics.median(s.run()[0] for _ in range(launches))
        steps = np.median(np.array([s.step_times() for _ in range(launches)]), axis=0)
        barrier = s.barrier_ms(launches)
        phases = inside_steps(np.array([s.step_detail() for _ in range(max(3, launches // 4))]))
        bw = hbm_bandwidth(s)
        rows = []
        for k, st in enumerate(s.plan):
            wb = weight_bytes(cyc, st)
            rows.append({"step": k, "boundary": cyc.commands[st.cmd].boundary.name, "ms": float(steps[k]),
                         "weight_bytes": wb, "hbm_ms": wb / bw})
        tail = float(steps[len(s.plan)]) if len(steps) > len(s.plan) else 0.0
        return {"M": m, "tp": tp, "blocks": s.blocks, "kernel": s.entry + (", row flags" if s.flags else ""),
                "cycle_ms": cycle_ms,
                "steps_ms": float(sum(r["ms"] for r in rows)), "tail_ms": tail,
                "hbm_bytes_per_ms": bw, "hbm_ms": float(sum(r["hbm_ms"] for r in rows)),
                "barrier_ms": barrier, "barriers": len(s.plan), "inside_step_us": phases, "steps": rows}


PHASES = ("step start to the first unit (arguments copied before the barrier)",
          "loads issued, post and comb (partials, Sinkhorn)", "fold and stream values (all-reduce folded)",
          "dot products", "block tree, partials stored", "the block's other items",
          "next step's header and arguments, barrier wait")


def inside_steps(d: np.ndarray) -> dict:
    """Median us per phase of block 0's first unit over the steps where every stamp was taken
    (launches x (steps + 1) x 8 stamps, ns)."""
    d = d.astype(np.int64)
    out = {}
    for k, name in enumerate(PHASES):
        if k < 6:
            a, b = d[:, :-1, k], d[:, :-1, k + 1]
        else:
            a, b = d[:, :-1, 6], d[:, 1:, 0]
        ok = (a > 0) & (b >= a) & (d[:, :-1, 1] > 0) & (d[:, :-1, 5] > 0)
        out[name] = float(np.median((b - a)[ok]) / 1e3) if ok.any() else None
    return out


def render(p: dict) -> str:
    ms = [r["ms"] for r in p["steps"]]
    floor = max(p["hbm_ms"], 0.0) + p["barrier_ms"] * p["barriers"]
    out = [f"M={p['M']} TP{p['tp']}: {p['kernel']} on {p['blocks']} blocks, cycle {p['cycle_ms']:.3f} ms "
           f"(steps {p['steps_ms']:.3f} ms + tail {p['tail_ms']:.3f})",
           "| what | ms per cycle | per step (median) |", "|---|---|---|",
           f"| persistent kernel, measured | {p['cycle_ms']:.3f} | {statistics.median(ms) * 1e3:.2f} us |",
           f"| HBM time of the weights ({p['hbm_bytes_per_ms'] / 1e9:.2f} TB/s measured) | {p['hbm_ms']:.3f} | "
           f"{p['hbm_ms'] / p['barriers'] * 1e3:.2f} us |",
           f"| grid barriers ({p['barriers']} x {p['barrier_ms'] * 1e3:.2f} us) | {p['barrier_ms'] * p['barriers']:.3f} | "
           f"{p['barrier_ms'] * 1e3:.2f} us |",
           f"| floor: HBM + barriers | {floor:.3f} | |",
           f"| distance to that floor | {p['cycle_ms'] - floor:.3f} | "
           f"{(p['cycle_ms'] - floor) / p['barriers'] * 1e3:.2f} us |",
           "inside a step (block 0's first unit, median us): " + ", ".join(
               f"{k} {v:.2f}" for k, v in p["inside_step_us"].items() if v is not None),
           "slowest steps: " + ", ".join(f"{r['boundary']} {r['ms'] * 1e3:.1f} us"
                                         for r in sorted(p["steps"], key=lambda r: -r["ms"])[:4])]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--launches", type=int, default=20)
    ap.add_argument("--cycle", default="persistent", choices=("persistent", "persistent-flags"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    res = [profile(m, args.tp, args.launches, args.cycle) for m in args.rows]
    for p in res:
        print(render(p) + "\n")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
