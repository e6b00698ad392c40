#!/usr/bin/env python3
"""CPU timings of the foundation at DeepSeek-V4-Flash geometry: synth, verify, and one cpu-driver replay
epoch (TP4, verify M=2, draft M=1 by default).

Each figure is the median over --repeats runs after --warmup untimed runs, wall clock
(time.perf_counter). The replay epoch is measured three ways: the cycle alone (Session.run: every
command of every rank, as the cpu driver runs them one after another), the full epoch (poison + run
+ bit-for-bit check of every output), and the slowest-rank time the replay engine reports (the cpu
driver's per-rank share of that wall time). CPU times say nothing about GPU speed.

Usage: PYTHONPATH=. python tools/bench_cpu.py [--preset dsv4-flash] [--tp 4] [--rows 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoder_shell.corpus.store import Corpus  # noqa: E402
from decoder_shell.corpus.synth import synth  # noqa: E402
from decoder_shell.corpus.verify import verify  # noqa: E402
from decoder_shell.drivers import get_driver  # noqa: E402
from decoder_shell.geometry import preset  # noqa: E402
from decoder_shell.replay.engine import Checker, load_inputs, prepare  # noqa: E402


def timed(fn, warmup: int, repeats: int, setup=None) -> dict:
    """Median, min, max of `repeats` timed calls after `warmup` untimed ones (seconds)."""
    times = []
    for i in range(warmup + repeats):
        if setup:
            setup()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "runs": len(times)}


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or platform.machine()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="dsv4-flash")
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--rows", type=int, default=2, help="verify rows M")
    ap.add_argument("--draft-rows", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3, help="repeats of synth and verify")
    ap.add_argument("--epochs", type=int, default=10, help="timed replay epochs (after 2 warm-up epochs)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)

    g = preset(args.preset, tp=args.tp, verify_rows=args.rows, draft_rows=args.draft_rows)
    tmp = Path(tempfile.mkdtemp(prefix="bench_cpu_"))
    res: dict = {"geometry": g.to_json(), "cpu": cpu_model(), "cores": os.cpu_count(),
                 "python": platform.python_version(), "numpy": np.__version__,
                 "date": time.strftime("%Y-%m-%d", time.gmtime())}
    try:
        out = tmp / "corpus"

        def fresh():
            shutil.rmtree(out, ignore_errors=True)

        res["synth"] = timed(lambda: synth(g, out), args.warmup, args.repeats, setup=fresh)
        corpus = Corpus.open(out)
        res["corpus"] = dict(corpus.info.counts)
        res["verify"] = timed(lambda: verify(Corpus.open(out)), args.warmup, args.repeats)

        t0 = time.perf_counter()
        cycle, bound = prepare(corpus)
        res["replay_load_s"] = time.perf_counter() - t0
        res["commands_per_rank"] = len(cycle.commands)
        checker = Checker(cycle)
        with get_driver("cpu").load(cycle) as s:
            load_inputs(s, bound.injected)
            shares, exact = [], True

            def cycle_only():
                shares.append(max(s.run()))

            def epoch():
                s.poison()
                s.run()
                nonlocal exact
                per_rank, _ = checker.check(s, bound.captured)
                exact = exact and not any(per_rank)

            res["replay_cycle"] = timed(cycle_only, 2, args.epochs, setup=s.poison)
            res["replay_epoch"] = timed(epoch, 2, args.epochs)
            res["replay_exact"] = exact
            res["engine_slowest_rank_ms"] = statistics.median(shares[2:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    geom = (f"{args.preset} TP{args.tp}, verify M={args.rows}, draft M={args.draft_rows} "
            f"({res['commands_per_rank']} commands per rank)")
    print(f"# cpu benchmark: {geom}")
    print(f"# {res['cpu']}, {res['cores']} cores, Python {res['python']}, numpy {res['numpy']}, {res['date']}")
    c = res["corpus"]
    print(f"# corpus: {c['manifests']} manifests, {c['blobs']} blobs, {c['referenced_bytes'] / 2**20:.1f} MiB "
          f"referenced, {c['stored_bytes'] / 2**20:.1f} MiB stored")
    print()
    print("| step | median | min | max | runs |")
    print("|---|---|---|---|---|")
    for key, label in (("synth", "synth (write the corpus)"), ("verify", "verify (read, check, recompute every op)"),
                       ("replay_cycle", "replay: one cycle (Session.run, all ranks)"),
                       ("replay_epoch", "replay: one epoch (poison + run + exact check)")):
        t = res[key]
        print(f"| {label} | {t['median_s']:.3f} s | {t['min_s']:.3f} s | {t['max_s']:.3f} s | {t['runs']} |")
    print()
    print(f"replay load (read + digest-check every blob, bind): {res['replay_load_s']:.3f} s; "
          f"every epoch exact: {res['replay_exact']}; engine-reported slowest rank "
          f"{res['engine_slowest_rank_ms']:.1f} ms (host numpy share, not a device time)")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0 if res["replay_exact"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
