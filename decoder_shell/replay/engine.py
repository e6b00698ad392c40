"""The replay engine: poison, launch, compare every output of every rank, epoch after epoch."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..commands.program import Cycle, build_cycle, reference
from ..corpus.bind import bind, require_linked
from ..corpus.store import Corpus
from ..corpus.synth import changed_inputs
from ..drivers.base import Driver, Session
from .compare import compare_outputs


@dataclass
class EpochResult:
    kind: str  # "graph" | "changed" | "eager"
    index: int
    times_ms: list[float]
    mismatches: list[int]  # per rank
    by_op: dict[str, int] = field(default_factory=dict)

    @property
    def cycle_ms(self) -> float:
        return max(self.times_ms)

    @property
    def exact(self) -> bool:
        return not any(self.mismatches)

    def to_json(self) -> dict:
        return {"kind": self.kind, "index": self.index, "times_ms": self.times_ms, "cycle_ms": self.cycle_ms,
                "mismatches": self.mismatches, "by_op": self.by_op}


def percentiles(values) -> dict:
    if not len(values):
        return {"median": None, "p10": None, "p90": None}
    a = np.asarray(values, dtype=np.float64)
    return {"median": float(np.median(a)), "p10": float(np.percentile(a, 10)), "p90": float(np.percentile(a, 90))}


@dataclass
class ReplayResult:
    corpus: str
    driver: str
    geometry: dict
    expected: str  # "captured" | "rebased"
    commands_per_rank: int
    timing_meaningful: bool
    settle: int
    epochs: list[EpochResult] = field(default_factory=list)
    timing_note: str = ""

    def of(self, kind: str) -> list[EpochResult]:
        return [e for e in self.epochs if e.kind == kind]

    @property
    def exact(self) -> bool:
        return all(e.exact for e in self.epochs)

    def timing(self) -> dict:
        graph = self.of("graph")
        ranks = len(graph[0].times_ms) if graph else 0
        return {"cycle_ms": percentiles([e.cycle_ms for e in graph]),
                "per_rank_ms": [percentiles([e.times_ms[r] for e in graph]) for r in range(ranks)]}

    def to_json(self) -> dict:
        return {"corpus": self.corpus, "driver": self.driver, "geometry": self.geometry,
                "expected": self.expected, "commands_per_rank": self.commands_per_rank,
                "timing_meaningful": self.timing_meaningful, "timing_note": self.timing_note,
                "settle_epochs": self.settle,
                "exact": self.exact, "timing": self.timing(),
                "summary": {k: {"epochs": len(self.of(k)), "exact": sum(e.exact for e in self.of(k))}
                            for k in ("graph", "changed")},
                "epochs": [e.to_json() for e in self.epochs]}


class Checker:
    """Compares a session's outputs with expected values, per rank and per op."""

    def __init__(self, cycle: Cycle):
        self.cycle = cycle

    def check(self, session: Session, expected: list[dict[int, np.ndarray]], skip=frozenset()):
        c = compare_outputs(session, self.cycle, expected, skip)
        return c.per_rank, c.by_op


def load_inputs(session: Session, values: list[dict[int, np.ndarray]]) -> None:
    for r, vals in enumerate(values):
        for bid, v in vals.items():
            session.write(r, bid, v)


def expected_outputs(cycle: Cycle, injected, captured, rebased: bool):
    """Captured outputs, or (rebased) the contracts' outputs from the captured inputs."""
    if not rebased:
        return captured
    return reference(cycle, injected)


def prepare(corpus: Corpus, progress=None):
    cycle = build_cycle(corpus.geometry, corpus.info.contract())
    bound = bind(corpus, cycle, progress)
    require_linked(bound, corpus)
    return cycle, bound


def replay(corpus: Corpus, driver: Driver, epochs: int = 70, changed: int = 0, settle: int = 3,
           seed: int = 0, progress=None) -> ReplayResult:
    cycle, bound = prepare(corpus)
    rebased = corpus.info.rebased
    expected = expected_outputs(cycle, bound.injected, bound.captured, rebased)
    checker = Checker(cycle)
    with driver.load(cycle) as session:
        result = ReplayResult(str(corpus.root), driver.describe(), corpus.geometry.to_json(),
                              "rebased" if rebased else "captured", len(cycle.commands),
                              session.timing_meaningful, settle,
                              timing_note="" if session.timing_meaningful else session.timing_note)
        load_inputs(session, bound.injected)
        for e in range(settle + epochs):
            session.poison()
            times = session.run(graph=True)
            per_rank, by_op = checker.check(session, expected)
            if e >= settle:
                result.epochs.append(EpochResult("graph", e - settle, times, per_rank, by_op))
            elif any(per_rank):
                result.epochs.append(EpochResult("settle", e, times, per_rank, by_op))
            if progress:
                progress("graph", e)
        for k in range(changed):
            new = changed_inputs(cycle, seed, k)
            inj = [{**bound.injected[r], **new[r]} for r in range(cycle.ranks)]
            want = reference(cycle, inj)
            load_inputs(session, new)
            session.poison()
            times = session.run(graph=True)
            per_rank, by_op = checker.check(session, want)
            result.epochs.append(EpochResult("changed", k, times, per_rank, by_op))
            if progress:
                progress("changed", k)
        load_inputs(session, bound.injected)
    return result
