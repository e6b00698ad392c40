"""Driver self-check: run random cycles on a driver and compare every output bit-for-bit with the contracts.

Each case draws a random geometry (hidden size, ranks 1-8, rows 1-9, reduction dtype, draft kind), a
random member of the ring all-reduce family, random implementation variants the driver offers, and
random input values over a wide range of magnitudes with special values (+-0, subnormals; `scale`
params blown up so sigmoid/softmax arguments hit the exp clamps). Non-finite intermediate results are
outside the contract (NaN payload bits are platform-defined), so values stay finite.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..commands.program import build_cycle, reference
from ..contracts.allreduce import RingContract
from ..corpus.synth import injected_values
from ..errors import ShellError
from ..geometry import Geometry
from .compare import compare_outputs

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


#: The mHC implementations the self-check draws from and sweeps (the cuda driver's; docs/CUDA.md).
#: The rows of the phase each fused-mN variant needs.
FUSED_ROWS = {"fused-m2": 2, "fused-m4": 4, "fused-m8": 8}
MHC_VARIANTS = ("fused-allreduce-mhc", *FUSED_ROWS, "cluster", "cluster-fused", "sinkhorn-inline", "grid-barrier")


def fits(cyc, cmd, name: str, chosen: dict) -> bool:
    """Whether mHC variant `name` can stand for `cmd` beside the variants `chosen` so far: fused kinds
    need a preceding all-reduce left plain, fused-mN a phase of N rows, clusters D a multiple of 1024."""
    prev = cyc.commands[cmd.index - 1] if cmd.index else None
    plain_prev = prev is not None and prev.op == "allreduce" and prev.index not in chosen
    rows = cyc.geometry.phase(cmd.boundary.phase).rows
    cluster_ok = cyc.geometry.hidden % 1024 == 0 and cyc.geometry.hidden <= 8192
    if name in FUSED_ROWS:
        return rows == FUSED_ROWS[name]
    if name == "fused-allreduce-mhc":
        return plain_prev
    if name == "cluster":
        return cluster_ok
    if name == "cluster-fused":
        return cluster_ok and plain_prev
    return name in MHC_VARIANTS


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
            for bound, name in ((0.2, "fused-allreduce-mhc"), (0.35, f"fused-m{rows}"), (0.55, "cluster"),
                                (0.75, "cluster-fused"), (0.85, "sinkhorn-inline"), (0.95, "grid-barrier")):
                if p < bound and name in MHC_VARIANTS and fits(cyc, cmd, name, v):
                    v[cmd.index] = name
                    break
    return v


#: Geometries of the sweep (hidden, ranks, verify rows, draft rows, reduction dtype): every fused-mN,
#: cluster and non-cluster hidden sizes, one rank to eight.
SWEEP_GEOMETRIES = ((1024, 1, 8, 1, "float32"), (2048, 2, 2, 1, "bfloat16"), (4096, 4, 4, 2, "bfloat16"),
                    (7168, 8, 2, 3, "float32"), (1500, 3, 1, 2, "bfloat16"))


def sweep_cases():
    """(cycle, variants) for every mHC variant at every geometry of SWEEP_GEOMETRIES, the
    variant on every mHC command it fits: each implementation on each command kind, deterministically."""
    for d, ranks, vr, dr, dtype in SWEEP_GEOMETRIES:
        g = Geometry(preset="random", hidden=d, layers=2, ranks=ranks, verify_rows=vr, draft_rows=dr,
                     draft_kind="dspark", reduce_dtype=dtype)
        c = RingContract()
        cyc = build_cycle(g, c)
        for name in MHC_VARIANTS:
            v = {}
            for cmd in cyc.commands:
                if cmd.op != "allreduce" and fits(cyc, cmd, name, v):
                    v[cmd.index] = name
            if v:
                yield cyc, v


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





def run_case(drv, cyc, values, variants, expected):
    """Graph and eager launches of one case; returns (elements compared, Counter of bad elements per op)."""
    total, bad = 0, Counter()
    with drv.load(cyc, variants) as s:
        for r in range(cyc.ranks):
            for bid, a in values[r].items():
                s.write(r, bid, a)
        for graph in (True, False):
            s.poison()
            s.run(graph=graph)
            c = compare_outputs(s, cyc, expected)
            n, b = c.elements, Counter(c.by_op)
            total += n
            bad.update(b)
    return total, bad


def _describe(cyc, variants) -> str:
    g = cyc.geometry
    return (f"hidden {g.hidden}, {g.ranks} ranks, " + ", ".join(f"{p.name} {p.rows}" for p in g.phases)
            + f", variants {', '.join(sorted(set(variants.values()))) or 'none'}")


def _check_case(drv, summary, case, cyc, values, variants, progress):
    """One case into `summary`; a driver error (a kernel that does not build or never ends) leaves
    with the case named, since the device may be unusable after it."""
    summary["variants_used"].update(variants.values())
    try:
        n, bad = run_case(drv, cyc, values, variants, reference(cyc, values))
    except ShellError as e:
        e.args = (f"case {case} ({_describe(cyc, variants)}): {e}",)
        raise
    summary["elements_compared"] += n
    if progress:
        progress(case, n, sum(bad.values()) if bad else 0)
    if bad:
        summary["mismatching_elements"] += sum(bad.values())
        summary["mismatches_by_op"].update(bad)
        summary["failures"].append({"case": case, "geometry": cyc.geometry.to_json(),
                                    "contract": cyc.contract.to_json(),
                                    "variants": {str(k): x for k, x in variants.items()}, "bad": dict(bad)})


def _summary(cases, seed) -> dict:
    return {"cases": cases, "seed": seed, "elements_compared": 0, "mismatching_elements": 0,
            "mismatches_by_op": Counter(), "variants_used": Counter(), "failures": []}


def _plain(summary) -> dict:
    summary["mismatches_by_op"] = dict(summary["mismatches_by_op"])
    summary["variants_used"] = dict(summary["variants_used"])
    return summary


def self_check(drv, cases: int, seed: int, variants=True, progress=None) -> dict:
    """Random cases on `drv`; variants=False runs only the driver's baseline kernels. progress(case, compared,
    mismatching), where given, follows each case (a case builds its kernels first: seconds each on a cold cache)."""
    rng = np.random.default_rng(seed)
    summary = _summary(cases, seed)
    for case in range(cases):
        g, c = random_case(rng)
        cyc = build_cycle(g, c)
        values = perturb(rng, injected_values(cyc, [seed, case]), cyc)
        v = random_variants(rng, cyc) if variants else {}
        _check_case(drv, summary, case, cyc, values, v, progress)
    return _plain(summary)


def variant_sweep(drv, seed: int, progress=None) -> dict:
    """Every mHC variant on every command it fits at every SWEEP_GEOMETRIES geometry (sweep_cases),
    values perturbed as in self_check: the coverage random draws may take many cases to reach."""
    rng = np.random.default_rng(seed)
    cases = list(sweep_cases())
    summary = _summary(len(cases), seed)
    for case, (cyc, v) in enumerate(cases):
        values = perturb(rng, injected_values(cyc, [seed, case]), cyc)
        _check_case(drv, summary, case, cyc, values, v, progress)
    return _plain(summary)
