"""On-device exactness check: every CUDA kernel against its numpy contract, many random cases.

Each case draws a random geometry (hidden size, ranks 1-8, rows 1-9, reduction dtype, draft kind), a
random member of the ring all-reduce family, random kernel variants (fused, fixed-width, ring,
segmented), and random input values over a wide range of magnitudes with special values (+-0,
subnormals, large values that hit the exp clamps). The whole cycle runs as a CUDA graph and eagerly;
every output element of every rank is compared bit-for-bit with the contracts. Prints a table last.

    python tools/cuda_check.py --cases 200 [--seed 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoder_shell.commands.program import build_cycle, reference  # noqa: E402
from decoder_shell.contracts.allreduce import RingContract  # noqa: E402
from decoder_shell.corpus.synth import injected_values  # noqa: E402
from decoder_shell.drivers import get_driver  # noqa: E402
from decoder_shell.geometry import Geometry  # noqa: E402
from decoder_shell.replay.compare import mismatches  # noqa: E402

SPECIALS = np.array([0.0, -0.0, 1e-40, -1e-40, 1e-30, -1e-30, 65504.0, -1.0, 1.0], dtype=np.float32)


def random_case(rng: np.random.Generator):
    d = int(rng.choice([1, 2, 3, 17, 64, 100, 255, 257, 1000, 1024, 1500, 2048, 4096, 7168]))
    g = Geometry(preset="random", hidden=d, layers=int(rng.integers(1, 3)), ranks=int(rng.integers(1, 9)),
                 verify_rows=int(rng.integers(1, 10)), draft_rows=int(rng.integers(0, 4)),
                 draft_kind=str(rng.choice(["mtp1", "dspark"])),
                 reduce_dtype=str(rng.choice(["bfloat16", "float32"])))
    c = RingContract(chunks_per_rank=int(rng.integers(1, 4)),
                     max_chunk_bytes=int(rng.choice([0, 0, 64, 1000])),
                     offset=int(rng.integers(-3, 4)), direction=int(rng.choice([1, -1])),
                     accumulation=str(rng.choice(["hop", "fp32"])), segments=int(rng.integers(1, 4)))
    return g, c


def random_variants(rng, cyc):
    v = {}
    cmds = cyc.commands
    for cmd in cmds:
        rows = cyc.geometry.phase(cmd.boundary.phase).rows
        p = rng.random()
        if cmd.op == "allreduce":
            if p < 0.2:
                v[cmd.index] = "ring"
            elif p < 0.3 and cyc.contract.segments in (2, 4):
                v[cmd.index] = f"segmented-{cyc.contract.segments}"
        else:
            prev = cmd.index - 1
            if p < 0.3 and cmds[prev].op == "allreduce" and prev not in v:
                v[cmd.index] = "fused-allreduce-mhc"
            elif p < 0.5 and rows in (2, 4, 8):
                v[cmd.index] = f"fused-m{rows}"
    return v


def perturb(rng, values, cyc):
    """Scale inputs over many magnitudes and plant special values (params keep their realistic scale)."""
    for r, vals in enumerate(values):
        for bid, a in list(vals.items()):
            b = cyc.buffers[bid]
            if b.kind != "input" and not (b.tensor == "scale" and rng.random() < 0.3):
                continue
            f = a.astype(np.float32) * np.float32(10.0 ** rng.uniform(-3, 3))
            if rng.random() < 0.5:
                idx = rng.integers(0, f.size, size=max(1, f.size // 50))
                f.reshape(-1)[idx] = rng.choice(SPECIALS, size=idx.size)
            f = np.clip(f, -3e38, 3e38)
            vals[bid] = f.astype(b.dtype)
    # params are replicated across ranks: keep them identical after perturbation
    for bid in range(len(cyc.buffers)):
        if cyc.buffers[bid].kind == "param":
            for r in range(1, len(values)):
                values[r][bid] = values[0][bid]
    return values


def check(session, cyc, expected):
    bad = Counter()
    n = 0
    for r in range(cyc.ranks):
        for b in cyc.outputs():
            got = session.read(r, b.id)
            n += got.size
            k = mismatches(got, expected[r][b.id])
            if k:
                bad[b.boundary.op] += k
    return n, bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    drv = get_driver("cuda")
    rng = np.random.default_rng(args.seed)
    total_elems, total_bad, per_op, failures = 0, 0, Counter(), []
    variant_use = Counter()
    t0 = time.time()
    for case in range(args.cases):
        g, c = random_case(rng)
        cyc = build_cycle(g, c)
        values = perturb(rng, injected_values(cyc, [args.seed, case]), cyc)
        expected = reference(cyc, values)
        variants = random_variants(rng, cyc)
        variant_use.update(variants.values())
        with drv.load(cyc, variants) as s:
            for r in range(cyc.ranks):
                for bid, a in values[r].items():
                    s.write(r, bid, a)
            for graph in (True, False):
                s.poison()
                s.run(graph=graph)
                n, bad = check(s, cyc, expected)
                total_elems += n
                if bad:
                    total_bad += sum(bad.values())
                    per_op.update(bad)
                    failures.append({"case": case, "graph": graph, "geometry": g.to_json(), "contract": c.to_json(),
                                     "variants": {str(k): v for k, v in variants.items()}, "bad": dict(bad)})
    # the deliberately inexact build must be caught
    g = Geometry(preset="random", hidden=4096, layers=1, ranks=2, verify_rows=2, draft_rows=0)
    cyc = build_cycle(g, RingContract())
    values = injected_values(cyc, [args.seed, 99999])
    expected = reference(cyc, values)
    with drv.load(cyc, {cmd.index: "fma" for cmd in cyc.commands if cmd.op != "allreduce"}) as s:
        for r in range(cyc.ranks):
            for bid, a in values[r].items():
                s.write(r, bid, a)
        s.poison()
        s.run()
        _, fma_bad = check(s, cyc, expected)
    dt = time.time() - t0
    summary = {"driver": drv.describe(), "cases": args.cases, "seed": args.seed, "elements_compared": total_elems,
               "mismatching_elements": total_bad, "mismatches_by_op": dict(per_op), "variants_used": dict(variant_use),
               "fma_variant_mismatches": dict(fma_bad), "seconds": round(dt, 1), "failures": failures[:10]}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    print(f"| check | value |\n|---|---|")
    for k in ("driver", "cases", "elements_compared", "mismatching_elements", "mismatches_by_op", "variants_used",
              "fma_variant_mismatches", "seconds"):
        print(f"| {k} | {summary[k]} |")
    return 0 if total_bad == 0 and sum(fma_bad.values()) > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
