"""Benchmark: the shell's all-reduce (one process per GPU) against NCCL through torch.distributed.

Same GPUs, same run. Messages: bf16 [M, D] for M = 1..8 and D = 4096 (dsv4-flash) and 7168 (dsv4-pro).
Both sides run K back-to-back all-reduces (one cycle's worth: 87 for flash, 123 for pro) inside one
CUDA graph, each on its own buffer; latency = graph time / K, median over repetitions, slowest rank.
The shell side is the replay's own path: a cycle of only the all-reduce commands, loaded by the cuda
driver with one process per rank (IPC-mapped peers, epoch-tagged arrival slots), checked bit for bit
against the contract on every rank. The NCCL side also reports whether its ranks agree bit for bit
and which ring contract, if any, reproduces its result (corpus/infer's search).

    NCCL_NVLS_ENABLE=0 python tools/bench_allreduce.py [--tp 2] [--rows 1 2 4 8] [--hidden 4096 7168]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoder_shell.commands.program import Cycle, build_cycle  # noqa: E402
from decoder_shell.contracts.allreduce import RingContract, allreduce  # noqa: E402
from decoder_shell.contracts.numerics import BF16  # noqa: E402
from decoder_shell.geometry import preset  # noqa: E402

PRESET = {4096: "dsv4-flash", 7168: "dsv4-pro"}


def allreduce_cycle(cyc: Cycle) -> Cycle:
    """The cycle's all-reduce commands alone (buffers and commands renumbered densely)."""
    ars = [c for c in cyc.commands if c.op == "allreduce"]
    used = sorted({b for c in ars for b in (*c.inputs.values(), *c.outputs.values())})
    new = {old: i for i, old in enumerate(used)}
    bufs = [dataclasses.replace(cyc.buffers[o], id=new[o]) for o in used]
    cmds = [dataclasses.replace(c, index=i, inputs={k: new[v] for k, v in c.inputs.items()},
                                outputs={k: new[v] for k, v in c.outputs.items()}) for i, c in enumerate(ars)]
    return Cycle(cyc.geometry, cyc.contract, bufs, cmds)


def partials(cyc: Cycle, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{b.id: rng.standard_normal(b.shape, dtype=np.float32).astype(BF16) for b in cyc.injected()}
            for _ in range(cyc.ranks)]


def shell_side(cyc: Cycle, reps: int) -> dict:
    from decoder_shell.drivers import get_driver
    drv = get_driver("cuda", placement="processes")
    values = partials(cyc, 11)
    with drv.load(cyc) as s:
        for r in range(cyc.ranks):
            for bid, a in values[r].items():
                s.write(r, bid, a)
        for _ in range(5):
            s.run()
        s.poison()
        s.run()
        bad, cross = 0, 0
        for c in cyc.commands:
            want = allreduce([values[r][c.inputs["x"]] for r in range(cyc.ranks)], cyc.contract)
            got = [s.read(r, c.outputs["out"]) for r in range(cyc.ranks)]
            bad += sum(int(np.count_nonzero(g.view(np.uint16) != want.view(np.uint16))) for g in got)
            cross += sum(int(np.count_nonzero(g.view(np.uint16) != got[0].view(np.uint16))) for g in got)
        times = [s.run() for _ in range(reps)]
    k = len(cyc.commands)
    return {"us": 1000 * statistics.median(max(t) for t in times) / k,
            "per_rank_us": [1000 * statistics.median(t[r] for t in times) / k for r in range(cyc.ranks)],
            "mismatches_vs_contract": bad, "cross_rank_mismatches": cross, "driver": drv.describe()}


def _nccl_rank(rank: int, world: int, port: int, jobs: list, reps: int, queue):
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device(f"cuda:{rank}"))
    out = []
    for m, d, k in jobs:
        # bits: one all-reduce of seeded partials, gathered for the contract search
        rng = np.random.default_rng(1000 * m + d + rank)
        x = torch.from_numpy(rng.standard_normal((m, d), dtype=np.float32)).to(torch.bfloat16).cuda()
        y = x.clone()
        dist.all_reduce(y)
        torch.cuda.synchronize()
        bits = (x.view(torch.int16).cpu().numpy(), y.view(torch.int16).cpu().numpy())
        # latency: K all-reduces in one graph
        bufs = [torch.zeros((m, d), dtype=torch.bfloat16, device="cuda") for _ in range(k)]
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            for b in bufs:
                dist.all_reduce(b)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for b in bufs:
                dist.all_reduce(b)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for i in range(reps + 5):
            dist.barrier()
            torch.cuda.synchronize()
            start.record()
            g.replay()
            end.record()
            torch.cuda.synchronize()
            if i >= 5:
                times.append(start.elapsed_time(end))
        out.append({"M": m, "D": d, "ms": statistics.median(times), "bits": bits})
        del g
    queue.put((rank, out))
    dist.destroy_process_group()


def nccl_side(world: int, jobs: list, reps: int) -> list[dict]:
    import socket

    import torch.multiprocessing as tmp
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    ctx = tmp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_nccl_rank, args=(r, world, port, jobs, reps, q)) for r in range(world)]
    for p in procs:
        p.start()
    res = dict(q.get(timeout=900) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    from decoder_shell.corpus.infer import Collective, infer
    rows = []
    for j, (m, d, k) in enumerate(jobs):
        ins = tuple(res[r][j]["bits"][0].view(BF16) for r in range(world))
        outs = tuple(res[r][j]["bits"][1].view(BF16) for r in range(world))
        cross = sum(int(np.count_nonzero(o.view(np.uint16) != outs[0].view(np.uint16))) for o in outs)
        found = infer([Collective(f"nccl[{m},{d}]", ins, outs)])
        rows.append({"us": 1000 * max(res[r][j]["ms"] for r in range(world)) / k,
                     "per_rank_us": [1000 * res[r][j]["ms"] / k for r in range(world)],
                     "cross_rank_mismatches": cross, "contract": found.describe()})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 7, 8])
    ap.add_argument("--hidden", type=int, nargs="+", default=[4096, 7168])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    jobs, shell = [], []
    for d in args.hidden:
        for m in args.rows:
            cyc = allreduce_cycle(build_cycle(preset(PRESET[d], tp=args.tp, verify_rows=m, draft_rows=0),
                                              RingContract()))
            jobs.append((m, d, len(cyc.commands)))
            shell.append(shell_side(cyc, args.reps))
            print(json.dumps({"M": m, "D": d, "shell": shell[-1]}), flush=True)
    nccl = nccl_side(args.tp, jobs, args.reps)
    rows = [{"M": m, "D": d, "allreduces_per_graph": k, "shell": s, "nccl": n}
            for (m, d, k), s, n in zip(jobs, shell, nccl)]
    if args.json:
        args.json.write_text(json.dumps({"tp": args.tp, "rows": rows}, indent=1))
    print(f"\n{shell[0]['driver']}, TP{args.tp}, bf16 all-reduce latency in CUDA graphs "
          f"(us per all-reduce, median, slowest rank)")
    print("| message | shell | NCCL | shell / NCCL | shell mismatches vs contract | ranks identical (shell, NCCL) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        s, n = r["shell"], r["nccl"]
        print(f"| [{r['M']}, {r['D']}] | {s['us']:.2f} | {n['us']:.2f} | {s['us'] / n['us']:.2f} | "
              f"{s['mismatches_vs_contract']} | {s['cross_rank_mismatches'] == 0}, {n['cross_rank_mismatches'] == 0} |")
    print("\nNCCL's bits: " + "; ".join(f"[{r['M']},{r['D']}] {r['nccl']['contract']}" for r in rows[:3]))


if __name__ == "__main__":
    main()
