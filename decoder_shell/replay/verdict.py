"""Gate verdicts: saved time (median and conservative), exactness, the decision, and the JSON file.

The decision rule (docs/GATE.md): PASS only when the baseline is exact, the candidate is exact (unless
the run is a deletion-only bound, where exactness is not asked), the driver's times measure the device,
and the conservative saving reaches the threshold. When everything required holds except that the
times are not meaningful (the cpu driver), the verdict is UNTIMED. Exit code: 0 PASS, 1 FAIL, 5 UNTIMED
(a code of its own, so a script never takes an untimed run for a failed or a passed one).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..atomic import write_atomic
from ..errors import UsageError
from .engine import EpochResult, percentiles

FORMAT = "decoder-shell-gate-verdict"
SCHEMA = 1
KINDS = ("settle", "graph", "changed")


def rep_medians(epochs: list[EpochResult], reps: int) -> list[float]:
    """Median slowest-rank cycle time of each repetition (one block of graph epochs)."""
    per = len(epochs) // reps
    return [float(np.median([e.cycle_ms for e in epochs[i * per:(i + 1) * per]])) for i in range(reps)]


def timing(epochs: list[EpochResult], reps: int) -> dict:
    ranks = len(epochs[0].times_ms)
    return {"cycle_ms": percentiles([e.cycle_ms for e in epochs]),
            "per_rank_ms": [percentiles([e.times_ms[r] for e in epochs]) for r in range(ranks)],
            "reps_ms": rep_medians(epochs, reps)}


def savings(base: dict, cand: dict) -> dict:
    """Saved ms/cycle at the slowest rank: median, and conservative (candidate's slowest repetition
    against the baseline's fastest); per-rank medians for context."""
    return {"median": base["cycle_ms"]["median"] - cand["cycle_ms"]["median"],
            "conservative": min(base["reps_ms"]) - max(cand["reps_ms"]),
            "per_rank_median": [b["median"] - c["median"] for b, c in zip(base["per_rank_ms"], cand["per_rank_ms"])]}


def exactness(side, ranks: int) -> dict:
    out = {}
    for kind in KINDS:
        es = side.of(kind)
        by_op = side.tally.by_kind.get(kind, {})
        out[kind] = {"epochs": len(es), "exact": sum(e.exact for e in es),
                     "per_rank": [sum(e.mismatches[r] for e in es) for r in range(ranks)],
                     "by_op": {op: list(v) for op, v in sorted(by_op.items())}}
    out["exact"] = all(e.exact for e in side.epochs)
    out["first"] = side.tally.first
    if side.tally.max_ulp is not None:
        out["max_ulp_per_rank"] = list(side.tally.max_ulp)
        out["max_ulp_first_per_rank"] = list(side.tally.max_ulp_first or [])
    return out


def decide(v: dict) -> tuple[str, str, str, list[str]]:
    """(verdict, exactness verdict, time verdict, reasons) from a verdict's measured parts."""
    reasons, reasons_note = [], None
    required = v["exactness"]["required"]
    cand_exact = v["exactness"]["candidate"]["exact"]
    if not v["exactness"]["baseline"]["exact"]:
        reasons.append("baseline is not exact: the driver or corpus is broken, so the comparison is void "
                       f"(first: {v['exactness']['baseline']['first']})")
    if v["mode"] == "contract":
        # a different contract (the fused MoE combine against the exact-official chain): never "exact"
        cand = v["exactness"]["candidate"]
        counts = [sum(k["per_rank"][r] for k in (cand[x] for x in KINDS)) for r in range(len(cand["graph"]["per_rank"]))]
        ulps = cand.get("max_ulp_per_rank", [])
        ulps1 = cand.get("max_ulp_first_per_rank", [])
        if cand_exact:
            exact_verdict = "DIFFERENT CONTRACT, no mismatch seen"
            reasons_note = ("the candidate computes a different contract; it matched the official outputs on "
                            "these inputs, which does not make it exact")
        else:
            exact_verdict = "DIFFERENT CONTRACT, MISMATCH"
            reasons.append(f"candidate computes a different contract: mismatching elements per rank {counts}, "
                           "largest difference per rank at the first changed command [" + ", ".join(f"{u:g}" for u in ulps1)
                           + "] ulp, over every changed command [" + ", ".join(f"{u:g}" for u in ulps)
                           + f"] ulp (later commands carry the earlier differences; first: {cand['first']})")
            reasons_note = None
    elif cand_exact:
        exact_verdict = "exact"
    elif required:
        exact_verdict = "MISMATCH"
        reasons.append(f"candidate is not exact (first: {v['exactness']['candidate']['first']})")
    else:
        exact_verdict = "not required"
    saved, threshold = v["saved_ms"]["conservative"], v["settings"]["threshold_ms"]
    if not v["timing_meaningful"]:
        time_verdict = "not meaningful"
    elif saved >= threshold:
        time_verdict = "PASS"
    else:
        time_verdict = "FAIL"
        reasons.append(f"conservative saving {saved:.3f} ms/cycle is below the threshold {threshold:.3f} ms")
    if reasons:
        verdict = "FAIL"
    elif time_verdict == "not meaningful":
        verdict = "UNTIMED"
        reasons.append(f"times from {v['driver']} measure the host, not a device: no time verdict")
    else:
        verdict = "PASS"
    if v["mode"] == "contract" and reasons_note:
        reasons.append(reasons_note)
    return verdict, exact_verdict, time_verdict, reasons


def build_verdict(meta: dict, cycle, plan, settings, runs: dict) -> dict:
    ranks = cycle.ranks
    graph = {s: r.of("graph") for s, r in runs.items()}
    t = {s: timing(graph[s], settings.reps) for s in runs}
    v = {"format": FORMAT, "schema": SCHEMA, **meta,
         "mode": "bound" if plan.deletion else "contract" if plan.contract_change else "candidate",
         "changes": [c.to_json(cycle) for c in plan.changes],
         "settings": {"reps": settings.reps, "epochs": settings.epochs, "changed": settings.changed,
                      "settle": settings.settle, "seed": settings.seed, "threshold_ms": settings.threshold_ms},
         "exactness": {"required": not plan.deletion,
                       **{s: exactness(runs[s], ranks) for s in runs}},
         "timing": t, "saved_ms": savings(t["baseline"], t["candidate"]),
         "epochs": {s: [e.to_json() for e in runs[s].epochs] for s in runs}}
    verdict, ev, tv, reasons = decide(v)
    v.update(verdict=verdict, exactness_verdict=ev, time_verdict=tv, reasons=reasons)
    return v


EXIT_UNTIMED = 5  # 4 is a kernel that failed to build or run (errors.BuildError)


def exit_code(v: dict) -> int:
    return {"PASS": 0, "UNTIMED": EXIT_UNTIMED}.get(v["verdict"], 1)


# --- the file ------------------------------------------------------------------------------------
REQUIRED = {"format": str, "schema": int, "corpus": str, "driver": str, "geometry": dict, "mode": str,
            "changes": list, "settings": dict, "exactness": dict, "timing": dict, "saved_ms": dict,
            "epochs": dict, "verdict": str, "exactness_verdict": str, "time_verdict": str, "reasons": list,
            "timing_meaningful": bool}


def save_verdict(v: dict, path: Path) -> None:
    try:
        write_atomic(Path(path), (json.dumps(v, indent=1, sort_keys=True) + "\n").encode())
    except OSError as e:
        raise UsageError(f"cannot write verdict {path}: {e.strerror or e}") from None


def load_verdict(path: Path) -> dict:
    """Read a saved verdict; anything that is not one is a one-line UsageError naming the file."""
    path = Path(path)
    try:
        v = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such verdict file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read ({e})") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(v, dict) or v.get("format") != FORMAT:
        raise UsageError(f"{path}: not a gate verdict (written by `shell gate --out`)")
    if v.get("schema") != SCHEMA:
        raise UsageError(f"{path}: verdict schema {v.get('schema')!r} is not supported (expected {SCHEMA})")
    for key, typ in REQUIRED.items():
        if not isinstance(v.get(key), typ):
            raise UsageError(f"{path}: malformed verdict ('{key}' missing or not a {typ.__name__})")
    return v


def epochs_from_json(v: dict, side: str, kind: str = "graph") -> list[EpochResult]:
    return [EpochResult(e["kind"], e["index"], [float(t) for t in e["times_ms"]], list(e["mismatches"]),
                        dict(e.get("by_op", {})))
            for e in v["epochs"].get(side, []) if e["kind"] == kind]
