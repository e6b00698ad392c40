"""The gate run: baseline and candidate sessions over the same inputs, interleaved B-A-B-A in one process.

Both sessions are built once. After a settle period, each repetition runs one block of graph epochs on
the baseline, then one on the candidate, so drift (clocks, heat, other tenants) hits both sides alike.
Changed epochs then run eagerly on both, with new inputs and expected outputs from the reference, to
catch a candidate that is exact only on the captured values. Every output of every rank is compared
bit-for-bit after every epoch; times are those session.run returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..commands.program import Cycle, reference
from ..commands.values import changed_inputs
from ..corpus.store import Corpus
from ..drivers.base import Driver, Session
from ..errors import UsageError
from .candidates import Plan
from .compare import compare_outputs, max_ulp
from .engine import EpochResult, expected_outputs, load_inputs, prepare
from .results import run_block
from .verdict import build_verdict

SIDES = ("baseline", "candidate")


@dataclass(frozen=True)
class GateSettings:
    reps: int = 3
    epochs: int = 70
    changed: int = 16
    settle: int = 3
    seed: int = 0
    threshold_ms: float = 0.50

    def __post_init__(self):
        if self.reps < 1 or self.epochs < 1:
            raise UsageError("--reps and --epochs must be at least 1")
        if self.changed < 0 or self.settle < 0:
            raise UsageError("--changed and --settle must be 0 or more")
        if not np.isfinite(self.threshold_ms) or self.threshold_ms < 0:
            raise UsageError("--threshold-ms must be a finite number >= 0")


@dataclass
class Tally:
    """Mismatching elements of one side: per kind of epoch, per op, per rank; and the first seen."""

    ranks: int
    by_kind: dict = field(default_factory=dict)  # kind -> op -> [per rank]
    first: str | None = None
    max_ulp: list | None = None  # contract changes: largest difference per rank on the changed outputs
    max_ulp_first: list | None = None  # ... on the first changed command's outputs (before any compounding)

    def add(self, kind: str, by_op_rank: dict[str, list[int]], first: str | None) -> None:
        ops = self.by_kind.setdefault(kind, {})
        for op, counts in by_op_rank.items():
            acc = ops.setdefault(op, [0] * self.ranks)
            for r, n in enumerate(counts):
                acc[r] += n
        if first and not self.first:
            self.first = first


@dataclass
class SideRun:
    label: str
    tally: Tally
    epochs: list[EpochResult] = field(default_factory=list)

    def of(self, kind: str) -> list[EpochResult]:
        return [e for e in self.epochs if e.kind == kind]


def check(cycle: Cycle, session: Session, expected: list[dict[int, np.ndarray]], skip=frozenset()):
    """Compare every output of every rank but `skip`: (per rank, op -> per rank, first mismatch or None)."""
    c = compare_outputs(session, cycle, expected, skip)
    return c.per_rank, c.by_op_rank, c.first


def changed_ulp(cycle: Cycle, session: Session, expected, plan: Plan) -> tuple[list[float], list[float]]:
    """Per rank, the largest difference (ulp of the output dtype: bf16 for the MoE combine) between the
    outputs of the changed commands and their expected values: (the first changed command in cycle
    order, every changed command). Only the first measures the contract change alone: a later one's
    inputs already carry the earlier differences (the next stage's routing may change with them)."""
    firsts, alls = [], []
    for r in range(cycle.ranks):
        per_cmd = [max([max_ulp(session.read(r, b), expected[r][b]) for b in cycle.commands[i].outputs.values()],
                       default=0.0) for i in sorted(plan.variants)]
        firsts.append(per_cmd[0] if per_cmd else 0.0)
        alls.append(max(per_cmd, default=0.0))
    return firsts, alls


def hand_expected(session: Session, cycle: Cycle, plan: Plan, expected) -> None:
    """Give a session the expected outputs of the commands it replaces ("copy" needs them)."""
    setter = getattr(session, "set_expected", None)
    needs_copy = "copy" in plan.variants.values()
    if setter is None:
        if needs_copy:
            raise UsageError("this driver's session has no set_expected(), so it cannot run 'copy'")
        return
    for i in plan.variants:
        for bid in cycle.commands[i].outputs.values():
            for r in range(cycle.ranks):
                setter(r, bid, expected[r][bid])


def _epoch(cycle, session, side: SideRun, expected, kind: str, index: int, graph: bool, plan=None) -> None:
    session.poison()
    times = [float(t) for t in session.run(graph=graph)]
    if len(times) != cycle.ranks:
        raise UsageError(f"driver returned {len(times)} rank times for a {cycle.ranks}-rank cycle")
    skip = plan.elided_outputs(cycle) if plan is not None else frozenset()
    per_rank, by_op, first = check(cycle, session, expected, skip)
    side.tally.add(kind, by_op, first)
    if plan is not None and plan.contract_change:
        u1, u = changed_ulp(cycle, session, expected, plan)
        side.tally.max_ulp = [max(a, b) for a, b in zip(side.tally.max_ulp or [0.0] * cycle.ranks, u)]
        side.tally.max_ulp_first = [max(a, b) for a, b in zip(side.tally.max_ulp_first or [0.0] * cycle.ranks, u1)]
    side.epochs.append(EpochResult(kind, index, times, per_rank, {op: sum(v) for op, v in by_op.items()}))


def run_gate(corpus: Corpus, driver: Driver, plan: Plan, cycle: Cycle | None = None, bound=None,
             settings: GateSettings = GateSettings(), progress=None) -> dict:
    """Run the gate; returns the verdict (a JSON-ready dict, see verdict.build_verdict)."""
    if cycle is None or bound is None:
        cycle, bound = prepare(corpus)
    rebased = corpus.info.rebased
    expected = expected_outputs(cycle, bound.injected, bound.captured, rebased)
    runs = {s: SideRun(s, Tally(cycle.ranks)) for s in SIDES}
    side_plan = {"baseline": None, "candidate": plan}
    # The candidate first: a variant the driver refuses fails before the baseline is built.
    with driver.load(cycle, plan.variants) as cand, driver.load(cycle) as base:
        sessions = {"baseline": base, "candidate": cand}
        for s in sessions.values():
            load_inputs(s, bound.injected)
        hand_expected(cand, cycle, plan, expected)
        for e in range(settings.settle):
            for s in SIDES:
                _epoch(cycle, sessions[s], runs[s], expected, "settle", e, True, side_plan[s])
        for rep in range(settings.reps):
            for s in SIDES:
                for e in range(settings.epochs):
                    _epoch(cycle, sessions[s], runs[s], expected, "graph", rep * settings.epochs + e, True,
                           side_plan[s])
                if progress:
                    block = runs[s].epochs[-settings.epochs:]
                    progress("block", f"{s} repetition {rep}",
                             f"median {float(np.median([e.cycle_ms for e in block])):.3f} ms, "
                             f"{sum(not e.exact for e in block)} inexact epochs" if block else "no epochs")
        for k in range(settings.changed):
            new = changed_inputs(cycle, settings.seed, k)
            want = reference(cycle, [{**bound.injected[r], **new[r]} for r in range(cycle.ranks)])
            hand_expected(cand, cycle, plan, want)
            for s in SIDES:
                load_inputs(sessions[s], new)
                _epoch(cycle, sessions[s], runs[s], want, "changed", k, False, side_plan[s])
            if progress:
                progress("changed", k, runs["candidate"].epochs[-1])
        timing_meaningful = bool(base.timing_meaningful and cand.timing_meaningful)
        note = "" if timing_meaningful else (base.timing_note if not base.timing_meaningful else cand.timing_note)
    meta = {"corpus": str(corpus.root), "driver": driver.describe(), "geometry": corpus.geometry.to_json(),
            "expected": "rebased" if rebased else "captured", "commands_per_rank": len(cycle.commands),
            "timing_meaningful": timing_meaningful, "timing_note": note, "run": run_block("gate", corpus, driver)}
    return build_verdict(meta, cycle, plan, settings, runs)
