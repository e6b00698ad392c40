"""The replay engine: poison, launch, compare every output of every rank, epoch after epoch."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..commands.program import Cycle, build_cycle, reference
from ..commands.values import changed_inputs
from ..corpus.bind import bind, require_linked
from ..corpus.store import Corpus
from ..drivers.base import Driver, Session
from .compare import compare_outputs
from .results import run_block, stats

FORMAT = "decoder-shell-replay"
SCHEMA = 1


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
    """The statistics of a set of times (results.stats: n, min, max, mean, stddev, median, p1 ... p99)."""
    return stats(values)


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
    run: dict = field(default_factory=dict)  # results.run_block: provenance
    breakdown: dict | None = None  # replay --breakdown: time per command, op kind and phase

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
        extra = {"breakdown": self.breakdown} if self.breakdown is not None else {}
        return {"format": FORMAT, "schema": SCHEMA, "run": self.run, **extra,
                "corpus": self.corpus, "driver": self.driver, "geometry": self.geometry,
                "expected": self.expected, "commands_per_rank": self.commands_per_rank,
                "timing_meaningful": self.timing_meaningful, "timing_note": self.timing_note,
                "settle_epochs": self.settle,
                "exact": self.exact, "timing": self.timing(),
                "summary": {k: {"epochs": len(self.of(k)), "exact": sum(e.exact for e in self.of(k))}
                            for k in ("graph", "changed")},
                "epochs": [e.to_json() for e in self.epochs]}

    @classmethod
    def from_json(cls, d: dict) -> "ReplayResult":
        """A saved replay result (for `shell report`); KeyError/TypeError on a malformed one."""
        epochs = [EpochResult(e["kind"], int(e["index"]), [float(t) for t in e["times_ms"]],
                              [int(n) for n in e["mismatches"]], dict(e.get("by_op", {}))) for e in d["epochs"]]
        return cls(str(d["corpus"]), str(d["driver"]), dict(d["geometry"]), str(d["expected"]),
                   int(d["commands_per_rank"]), bool(d["timing_meaningful"]), int(d["settle_epochs"]),
                   epochs, str(d.get("timing_note", "")), dict(d.get("run", {})), d.get("breakdown"))


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
           seed: int = 0, progress=None, breakdown: bool = False) -> ReplayResult:
    """Replay `epochs` graph epochs after `settle`, then `changed` changed epochs; with `breakdown`,
    one more epoch timed node by node (its outputs are checked like every other epoch's)."""
    cycle, bound = prepare(corpus, (lambda cmd: progress("bind", cmd.index)) if progress else None)
    rebased = corpus.info.rebased
    expected = expected_outputs(cycle, bound.injected, bound.captured, rebased)
    checker = Checker(cycle)
    with driver.load(cycle) as session:
        result = ReplayResult(str(corpus.root), driver.describe(), corpus.geometry.to_json(),
                              "rebased" if rebased else "captured", len(cycle.commands),
                              session.timing_meaningful, settle,
                              timing_note="" if session.timing_meaningful else session.timing_note,
                              run=run_block("replay", corpus, driver))
        load_inputs(session, bound.injected)
        for e in range(settle + epochs):
            session.poison()
            times = session.run(graph=True)
            per_rank, by_op = checker.check(session, expected)
            epoch = EpochResult("graph" if e >= settle else "settle", e - settle if e >= settle else e,
                                times, per_rank, by_op)
            if e >= settle or any(per_rank):
                result.epochs.append(epoch)
            if progress:
                progress("graph", e, epoch)
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
                progress("changed", k, result.epochs[-1])
        load_inputs(session, bound.injected)
        if breakdown:
            from .breakdown import profile
            session.poison()
            result.breakdown = profile(session, cycle)
            per_rank, by_op = checker.check(session, expected)
            if any(per_rank):
                result.epochs.append(EpochResult("profiled", 0, [result.breakdown["total_ms"]] * cycle.ranks,
                                                 per_rank, by_op))
    return result
