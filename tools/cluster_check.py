"""On-device checks of the cluster cycle (`--cycle persistent-cluster`): exactness, the FMA build, the
watchdog, and where the time goes. Prints a short table last; JSON with --json.

1. random cycles the kernel is built for (hidden 1024/2048/4096, 1-8 ranks, 1-8 verify rows, 0-3
   draft rows of either draft kind, bf16 or fp32 reduction, a random member of the ring family,
   values over many magnitudes with special values), selected as the gate candidate
   `cycle=persistent-cluster` and launched twice each; every element of every rank compared
   bit-for-bit with the contracts;
2. the same kernel built with FMA contraction must be caught;
3. the watchdog: a cluster that never arrives at one join must end the launch with one line;
4. where the time goes, dsv4-flash TP4 verify at each --profile-rows: the launch's time, per-step
   stamps of cluster 0 block 0 (phase by phase: stream values, dot products, the partials' exchange,
   the mixes, Sinkhorn, join), every block's stamps (how far apart the blocks are, which rank publishes last,
   the fold's latency after the last publish, each block's receipt of the exchange after its cluster's last dot
   products and which block ends them last; `--dump` keeps the raw stamps), the same grid doing only its
   synchronization (phase by phase), and the HBM time of each step's weights at the copy bandwidth measured in the
   same run.

    python tools/cluster_check.py [--cases 12] [--seed 1] [--profile-rows 2 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_shell.commands.program import build_cycle, reference  # noqa: E402
from decoder_shell.contracts.allreduce import RingContract  # noqa: E402
from decoder_shell.corpus.synth import injected_values  # noqa: E402
from decoder_shell.drivers import get_driver  # noqa: E402
from decoder_shell.drivers.cuda.cluster_cycle import CL_SIZE, HIDDEN, PRO_SLOTS, ClusterSession  # noqa: E402
from decoder_shell.drivers.cuda.steps import weight_bytes  # noqa: E402
from decoder_shell.errors import MismatchError, UsageError  # noqa: E402
from decoder_shell.geometry import Geometry, preset  # noqa: E402
from decoder_shell.replay.compare import compare_outputs  # noqa: E402
from decoder_shell.replay.selfcheck import perturb, run_case  # noqa: E402
from persistent_profile import hbm_bandwidth  # noqa: E402

FORM = "persistent-cluster"
# (from stamp k to k + 1 of block 0's thread 0: "partials in" until its own wait on the exchange passed, "tree +
# mixes" until its own rows' mixes are made: no block barrier follows the exchange)
PHASES = ("stream values", "dot products", "partials in", "tree + mixes", "Sinkhorn / y + join",
          "to next step")


def random_cycle(rng):
    g = Geometry(preset="random", hidden=int(rng.choice(HIDDEN)), layers=int(rng.integers(1, 4)),
                 ranks=int(rng.integers(1, 9)), verify_rows=int(rng.integers(1, 9)),
                 draft_rows=int(rng.integers(0, 4)), draft_kind=str(rng.choice(["mtp1", "dspark"])),
                 reduce_dtype=str(rng.choice(["bfloat16", "float32"])))
    c = RingContract(chunks_per_rank=int(rng.integers(1, 4)), max_chunk_bytes=int(rng.choice([0, 0, 64, 1000])),
                     offset=int(rng.integers(-3, 4)), direction=int(rng.choice([1, -1])),
                     accumulation=str(rng.choice(["hop", "fp32"])), segments=int(rng.integers(1, 4)))
    return g, c


def exactness(drv, cases: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {"cases": cases, "elements_compared": 0, "mismatching_elements": 0, "failures": [], "skipped": []}
    for k in range(cases):
        g, c = random_cycle(rng)
        cyc = build_cycle(g, c)
        values = perturb(rng, injected_values(cyc, [seed, k]), cyc)
        expected = reference(cyc, values)
        try:
            n, bad = run_case(drv, cyc, values, {cmd.index: FORM for cmd in cyc.commands}, expected)
        except UsageError as e:  # a cycle this device cannot hold (more ranks than clusters at once): not a check
            out["skipped"].append({"case": k, "geometry": g.to_json(), "why": str(e)})
            print(f"case {k}: D={g.hidden} R={g.ranks} M={g.verify_rows}/{g.draft_rows}: skipped: {e}", flush=True)
            continue
        out["elements_compared"] += n
        if bad:
            out["mismatching_elements"] += sum(bad.values())
            out["failures"].append({"case": k, "geometry": g.to_json(), "contract": c.to_json(),
                                    "bad": dict(list(bad.items())[:8])})
        print(f"case {k}: D={g.hidden} R={g.ranks} M={g.verify_rows}/{g.draft_rows} {g.reduce_dtype}: "
              f"{n} elements, {sum(bad.values())} mismatching", flush=True)
    out["failures"] = out["failures"][:6]
    return out


def loaded(drv, cyc, values, **kw):
    s = ClusterSession(drv, cyc, **kw)
    for r in range(cyc.ranks):
        for bid, a in values[r].items():
            s.write(r, bid, a)
    return s


def fma_caught(drv, seed: int) -> int:
    g = Geometry(preset="random", hidden=4096, layers=1, ranks=2, verify_rows=2, draft_rows=0)
    cyc = build_cycle(g, RingContract())
    values = injected_values(cyc, [seed, 99999])
    with loaded(drv, cyc, values, fma=True) as s:
        s.poison()
        s.run()
        return sum(compare_outputs(s, cyc, reference(cyc, values)).per_rank)


def watchdog(drv) -> str:
    g = Geometry(preset="random", hidden=1024, layers=2, ranks=2, verify_rows=2, draft_rows=0)
    cyc = build_cycle(g, RingContract())
    with loaded(drv, cyc, injected_values(cyc, [5, 5]), skip_step=2, watchdog_ms=200) as s:
        t0 = time.time()
        try:
            s.run()
        except MismatchError as e:
            return f"fired after {time.time() - t0:.2f} s: {e}"
        return "did not fire"


# A step's stamps in every block, in the order they are reached (detail index k; stream values only in by-cluster)
STAMPS = (("start", 0), ("stream values", 1), ("dots done", 2), ("partials in", 3), ("Sinkhorn done", 5),
          ("y stored", 8), ("rank barrier", 7), ("published", 10), ("fold done", 9), ("end", 6))


def blocks_report(e: np.ndarray) -> dict:
    """Every block's stamps of a traced launch's steps ([steps][blocks][16], globaltimer ns): how far apart the blocks
    are at each point of a step, which rank publishes last, each cluster's way through a step, the exchange's receipt
    by block, and what the diagnosis builds add (CL_WARP_STAMPS, CL_WAIT_STAMP, CL_SM_STAMP)."""
    # every block's stamps: how far apart the 16 x ranks blocks are at each point of a step (max - min over
    # blocks, median over steps), which rank publishes last, and the fold's latency once the last rank
    # published the same columns (block b's fold done - the latest publish stamp of block b over the ranks:
    # the join's own cost, without the wait for a late rank)
    nc = e.shape[1] // CL_SIZE

    def by_clusters(a):  # [steps][blocks] -> [steps][clusters][CL_SIZE]
        return a.reshape(len(e), nc, CL_SIZE)

    spread = {name: float(np.median(e[:, :, k].max(1) - e[:, :, k].min(1))) / 1e3
              for name, k in STAMPS if k != 1}
    pub = by_clusters(e[:, :, 10])
    last = np.bincount(pub.max(2).argmax(1), minlength=nc)
    handoff = by_clusters(e[:, :, 9]) - pub.max(1)[:, None, :]
    # the block whose fold ends a step last: its index in its cluster and its cluster (a straggler of one layout or
    # one cluster shows as a peak; a cluster is a rank where the rank has one row group)
    late = e[:, :, 9].astype(np.int64).argmax(1)
    # each cluster's way through a step: at each stamp, the cluster's latest block after the step's earliest start
    # (median over steps): where a cluster that is late falls behind, or whether it starts behind
    t0 = e[:, :, 0].min(1)[:, None]
    by_cluster = {name: [float(v) / 1e3 for v in np.median(by_clusters(e[:, :, k] - t0).max(2), 0)]
                  for name, k in STAMPS}
    # the exchange by receiving block: its partials in after the latest dots done of its cluster (median over steps
    # and clusters), by the block's index in its cluster (warp w of every block pushes to block w, or warp 0 to all in
    # the builds of CL_PUSH_W0)
    recv = np.median(by_clusters(e[:, :, 3]) - by_clusters(e[:, :, 2]).max(2)[:, :, None], (0, 1)) / 1e3
    latest_dots = np.bincount(by_clusters(e[:, :, 2]).argmax(2).ravel(), minlength=CL_SIZE)
    skew = {"spread_us": spread, "by_cluster_us": by_cluster, "last_publisher_counts": last.tolist(),
            "last_fold_by_block": np.bincount(late % CL_SIZE, minlength=CL_SIZE).tolist(),
            "last_fold_by_cluster": np.bincount(late // CL_SIZE, minlength=nc).tolist(),
            "partials_in_after_last_dots_by_block_us": [float(v) for v in recv],
            "last_dots_by_block": latest_dots.tolist(),
            "fold_after_last_publish_us": {"median": float(np.median(handoff)) / 1e3,
                                           "p90": float(np.percentile(handoff, 90)) / 1e3,
                                           "max of a step (median)": float(np.median(handoff.max((1, 2)))) / 1e3}}
    # which warp reaches each block barrier last (and the first after C), every block: its time after the step's
    # start (stamps 11-14 carry the time to 32 ns and the warp in the low five bits), and how often each warp is
    # the last; thread 0's weight copy issued (15)
    st0 = e[:, :, 0].astype(np.int64)

    def after_start(v):  # the median over steps and blocks of stamps v after their block's step start, us
        return {"us_after_start": float(np.median(v - st0)) / 1e3}

    warps = {}
    for name, k in (("first warp after C", 14), ("last warp after C", 11), ("last warp after A", 12),
                    ("last warp at the end", 13)) if e[:, :, 13].any() else ():  # (CL_WARP_STAMPS=1 builds)
        v = e[:, :, k].astype(np.int64)
        warps[name] = after_start(v & ~31) | {"warp_counts": np.bincount((v & 31).ravel(), minlength=32)[:16].tolist()}
    if e[:, :, 11].any() and not e[:, :, 13].any():  # (CL_WAIT_STAMP=1 builds: thread 0's own waits)
        for name, k in (("thread 0's stream values done", 11), ("thread 0 past the weights' wait", 12)):
            warps[name] = after_start(e[:, :, k].astype(np.int64))
    if e[:, :, 15].all():  # (builds of two weight buffers: the copy requested at the step's start)
        warps["weight copy issued"] = after_start(e[:, :, 15].astype(np.int64))
    warps["end stamp"] = after_start(e[:, :, 6].astype(np.int64))
    skew["warps"] = warps
    if e[:, :, 14].any() and not e[:, :, 13].any():  # (CL_SM_STAMP=1 builds: each block's SM + 1; blocks stay put)
        skew["sm_by_cluster"] = (e[0, :, 14] - 1).reshape(nc, CL_SIZE).tolist()
    return skew


def profile(drv, rows: int, tp: int, reps: int = 30, dump: Path | None = None) -> dict:
    g = preset("dsv4-flash", tp=tp, verify_rows=rows, draft_rows=0)
    cyc = build_cycle(g, RingContract())
    values = injected_values(cyc, [7, rows])
    with loaded(drv, cyc, values) as s:
        gbps = hbm_bandwidth(s) / 1e6  # bytes per ms -> GB/s
        for _ in range(5):
            s.launch()
        cycle_ms = statistics.median(s.launch() for _ in range(reps))
        launch = launch_span(s, reps)
        sync_step_us = s.barrier_ms(reps) * 1e3
        every = s.step_detail(every_block=True).astype(np.int64)[:-1]  # [steps][blocks][16]: one traced launch
        launch.update(trace_span(s))
        if dump:
            np.savez_compressed(dump / f"every-tp{tp}-m{rows}.npz", every=every)
        d = every[:, 0]  # cluster 0 block 0
        plan = s.plan
        stamps = [d[:, k] for k in (0, 1, 2, 3, 4)] + [d[:, 6]]
        nxt = np.append(d[1:, 0], d[-1, 6])
        cols = [stamps[i + 1] - stamps[i] for i in range(5)] + [nxt - d[:, 6]]
        body = slice(1, len(plan) - 1)  # post/pre boundaries (not the first and the head)
        per_phase = {name: float(np.median(c[body])) / 1e3 for name, c in zip(PHASES, cols)}
        sk = d[body, 5] - d[body, 4]
        per_phase["(Sinkhorn warp alone)"] = float(np.median(sk)) / 1e3
        # the helper warps' path beside it (helper thread 0's stamps, the first from thread 0's mixes): pre and
        # y, the join, the next fold
        # (where a rank is one cluster: 8 -> 7 the rank's barrier, 7 -> 10 publishing the words; else the grid
        # counter's arrival and poll, then every helper past it)
        for name, k0, k1 in (("(helpers: pre + y)", 4, 8), ("(helpers: join)", 8, 7), ("(helpers: publish / past join)", 7, 10),
                             ("(helpers: fold)", 10, 9)):
            per_phase[name] = float(np.median(d[body, k1] - d[body, k0])) / 1e3
        skew = blocks_report(every[body])
        # the same launch doing only its synchronization (no Sinkhorn warps: thread 0 is helper thread 0): where its
        # ~4 us a step go (block barriers, the exchange, the rank's barrier, publishing, the fold's polls)
        z = s.step_detail(mode=1).astype(np.int64)[:-1]
        sync = {}
        for name, k0, k1 in (("to exchange", 0, 2), ("exchange", 2, 3), ("rank barrier", 3, 7), ("publish", 7, 10),
                             ("polls", 10, 9), ("to end", 9, 6)):
            sync[name] = float(np.median(z[body, k1] - z[body, k0])) / 1e3
        sync["to next step"] = float(np.median((np.append(z[1:, 0], z[-1, 6]) - z[:, 6])[body])) / 1e3
        hbm_us = [weight_bytes(cyc, st) / (gbps * 1e9) * 1e6 for st in plan]
        return {"M": rows, "tp": tp, "cycle_ms": cycle_ms, "steps": len(plan), "grid": s.describe_grid(),
                "step_us_median": float(np.median(np.diff(d[:, 0])[body])) / 1e3,
                "sync_only_us_per_step": sync_step_us, "hbm_us_per_step": float(np.median(hbm_us)),
                "phases_us": per_phase, "sync_only_phases_us": sync, "blocks": skew, "copy_GBps": gbps,
                "launch_us": launch}


def launch_span(s, reps: int) -> dict:
    """The cycle's time as launch() reports it (its events nodes of a one-kernel graph) against events recorded
    around a direct launch (the host's launch call inside), alternating."""
    graph, direct = [], []
    for _ in range(reps):
        graph.append(s.launch(timing="graph"))
        direct.append(s.launch(timing="direct"))
    return {"graph-timed": statistics.median(graph) * 1e3, "direct-timed": statistics.median(direct) * 1e3}


#: the prologue's pieces as CL_ENTRY_STAMP stamps their ends (cluster_cycle.cu CL_PRO_STAMP), after the entry
PROLOGUE = ("barriers made", "step 0's arguments", "first ranks", "x folded")


def trace_span(s) -> dict:
    """After a traced launch: cluster 0 block 0's steps, first start to the end, and its entry to step 0's start
    with the prologue's pieces (CL_ENTRY_STAMP builds; absent otherwise), us."""
    n = len(s.plan)
    t = s.trace_stamps(extra=PRO_SLOTS)
    out = {"steps (traced)": (t[n] - t[0]) / 1e3}
    if t[n + 1]:
        out["entry to step 0 (traced)"] = (t[0] - t[n + 1]) / 1e3
        prev = t[n + 1]
        for k, name in enumerate(PROLOGUE):
            if t[n + 2 + k]:  # (a piece a cycle skips, the first ranks and fold of an unfused step 0, is not stamped)
                out[f"prologue: {name}"] = (t[n + 2 + k] - prev) / 1e3
                prev = t[n + 2 + k]
        out["prologue: to step 0"] = (t[0] - prev) / 1e3
    return out

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=12)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile-rows", type=int, nargs="*", default=[2, 8])
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--dump", type=Path, help="a folder for each profile's raw stamps ([steps][blocks][16], .npz)")
    args = ap.parse_args()
    drv = get_driver("cuda", placement="emulated")
    res = {"driver": drv.describe()}
    res["exactness"] = exactness(drv, args.cases, args.seed)
    res["fma_mismatches"] = fma_caught(drv, args.seed)
    res["watchdog"] = watchdog(drv)
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
    res["profile"] = [profile(drv, m, args.tp, dump=args.dump) for m in args.profile_rows]
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    e = res["exactness"]
    print("| check | value |\n|---|---|")
    print(f"| random cycles | {e['cases']} cases ({len(e['skipped'])} skipped: more ranks than the device holds), "
          f"{e['elements_compared']} elements, {e['mismatching_elements']} mismatching |")
    print(f"| FMA build | {res['fma_mismatches']} mismatching (must be > 0) |")
    print(f"| watchdog | {res['watchdog'][:160]} |")
    for p in res["profile"]:
        ph = ", ".join(f"{k} {v:.2f}" for k, v in p["phases_us"].items())
        print(f"| TP{p['tp']} M={p['M']} | cycle {p['cycle_ms']:.3f} ms, {p['steps']} steps, step {p['step_us_median']:.2f} us "
              f"(sync only {p['sync_only_us_per_step']:.2f}, HBM {p['hbm_us_per_step']:.2f} at {p['copy_GBps']:.0f} GB/s); us: {ph}; {p['grid']} |")
        lu = ", ".join(f"{k} {v:.1f}" for k, v in p["launch_us"].items())
        print(f"| TP{p['tp']} M={p['M']} launch | us: {lu} |")
        so = ", ".join(f"{k} {v:.2f}" for k, v in p["sync_only_phases_us"].items())
        print(f"| TP{p['tp']} M={p['M']} sync only | us: {so} |")
        sk = p["blocks"]
        sp = ", ".join(f"{k} {v:.2f}" for k, v in sk["spread_us"].items())
        fa = ", ".join(f"{k} {v:.2f}" for k, v in sk["fold_after_last_publish_us"].items())
        print(f"| TP{p['tp']} M={p['M']} every block | spread (us, max - min over blocks): {sp}; last publisher by rank "
              f"{sk['last_publisher_counts']}; last fold by block {sk['last_fold_by_block']}, by cluster "
              f"{sk['last_fold_by_cluster']}; fold done after the last rank published (us): {fa} |")
        bc = "; ".join(f"{k} " + " / ".join(f"{x:.2f}" for x in v) for k, v in sk["by_cluster_us"].items())
        print(f"| TP{p['tp']} M={p['M']} by cluster | us after the step's earliest start, each cluster's latest block: {bc} |")
        rb = " ".join(f"{x:.2f}" for x in sk["partials_in_after_last_dots_by_block_us"])
        print(f"| TP{p['tp']} M={p['M']} exchange by block | partials in after the cluster's last dots done (us, by the "
              f"block's index): {rb}; last dots done by block {sk['last_dots_by_block']} |")
        if "sm_by_cluster" in sk:
            print(f"| TP{p['tp']} M={p['M']} SMs | each cluster's blocks: " + "; ".join(
                " ".join(map(str, c)) for c in sk["sm_by_cluster"]) + " |")
        wp = "; ".join(f"{k} {v['us_after_start']:.2f}" + (f" (warps {v['warp_counts']})" if "warp_counts" in v else "")
                       for k, v in sk["warps"].items())
        print(f"| TP{p['tp']} M={p['M']} warps | us after the step's start: {wp} |")
    ok = e["mismatching_elements"] == 0 and res["fma_mismatches"] > 0 and res["watchdog"].startswith("fired")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
