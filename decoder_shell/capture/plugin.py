"""The capture plugin of one rank: markers, arming, recording an armed cycle, writing it out.

Disarmed, `cycle()` is an integer increment and two attribute reads, `phase()` and `record_mhc()`
one attribute read each: no hooks, no dispatch mode, no copies. Arming is agreed across ranks at a
cycle boundary: rank 0, at the start of its cycle i, sends "capture from cycle i+1" to every rank
and waits for their acknowledgements before it runs any collective of cycle i. No rank can finish
cycle i without rank 0, so every rank is armed before it starts cycle i+1 and all ranks capture the
same cycles. After the armed cycles each rank disarms itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..geometry import Geometry
from . import _NULL
from .assemble import assemble
from .channel import RankHub, RankLink
from .errors import CaptureError
from ..corpus.store import Corpus, CorpusInfo
from .recorder import PhaseRecorder

NULL = _NULL  # one shared no-op context: a disarmed marker allocates nothing


@dataclass
class Arm:
    """What to capture: the geometry, how many cycles, from which cycle; per cycle the staging folder
    the ranks write (`corpora`) and the target it will replace (`targets`, whose blobs are reused)."""

    capture: str
    geometry: Geometry
    cycles: int
    corpora: list
    start: int = -1
    targets: list = field(default_factory=list)

    def to_message(self) -> dict:
        return {"type": "arm", "capture": self.capture, "geometry": self.geometry.to_json(),
                "cycles": self.cycles, "corpora": list(self.corpora), "start": self.start,
                "targets": list(self.targets)}

    @classmethod
    def from_message(cls, m: dict) -> "Arm":
        return cls(m["capture"], Geometry.from_json(m["geometry"]), int(m["cycles"]), list(m["corpora"]),
                   int(m["start"]), list(m.get("targets", [])))


@dataclass
class RankProgress:
    """One rank's account of an armed capture, sent to rank 0 as it goes."""

    capture: str
    rank: int
    total: int
    state: str = "armed"  # armed | capturing | writing | done | error
    written: int = 0
    cycle_ms: list = field(default_factory=list)
    write_ms: list = field(default_factory=list)
    blobs_new: int = 0
    blobs_reused: int = 0
    skipped: list = field(default_factory=list)
    probes: list = field(default_factory=list)  # [{"kind", "n", "dtype", "out": digest}]
    error: str = ""

    def to_message(self) -> dict:
        return {"type": "progress", **self.__dict__}


class CapturePlugin:
    def __init__(self, rank: int, world: int, run_dir: Path, *, coordinator_factory=None):
        self.rank = rank
        self.world = world
        self.run_dir = Path(run_dir)
        self._arm: Arm | None = None
        self._pending: Arm | None = None
        self._cycle_index = 0
        self._active: _CycleCapture | None = None
        self._recorder: PhaseRecorder | None = None
        self._progress: RankProgress | None = None
        self.coordinator = None
        self.link = None
        self.group = None  # recorder.TpGroup: which process group's all-reduces are the cycle's
        self.probe = None  # optional callable(np.ndarray) -> np.ndarray: the service's own TP all-reduce
        self._probe_results: list = []
        self.arm_check = None  # optional callable(Geometry) -> reason to refuse an arm, or None
        if rank == 0:
            self.coordinator = coordinator_factory(self)
            self.hub = RankHub(self.run_dir, world, self.coordinator.on_message, self.coordinator.on_lost)
        else:
            self.link = RankLink(self.run_dir, rank, self._on_message)

    # --- markers (called by the service) ---------------------------------------------------
    def cycle(self):
        """Context of one draft + verify cycle."""
        i = self._cycle_index
        self._cycle_index = i + 1
        if self._pending is not None:
            self.coordinator.begin(i + 1)
        arm = self._arm
        if arm is None or i < arm.start:
            return NULL
        return _CycleCapture(self, arm, i)

    def phase(self, name: str):
        """Context of one phase ("draft" or "verify") inside a cycle."""
        active = self._active
        if active is None:
            return NULL
        return active.phase(name)

    def record_mhc(self, kind, streams, fn, base, scale, y, post=None, comb=None, norm_weight=None, x=None):
        """Explicit marker for services whose mHC is not a transformers module."""
        rec = self._recorder
        if rec is not None:
            rec.guard(rec.record_mhc, kind, streams, fn, base, scale, y, post, comb,
                      norm_weight=norm_weight, x=x)

    @property
    def armed(self) -> bool:
        return self._arm is not None or self._pending is not None

    # --- arming ----------------------------------------------------------------------------
    def _on_message(self, msg: dict) -> None:
        """A non-zero rank's channel thread: arm or disarm as rank 0 says."""
        if msg.get("type") == "arm":
            self._arm = Arm.from_message(msg)
            self.link.send({"type": "ack", "capture": msg["capture"]})
        elif msg.get("type") == "disarm" and self._arm is not None and self._arm.capture == msg.get("capture"):
            self._arm = None

    def report(self, p: RankProgress) -> None:
        if self.rank == 0:
            self.coordinator.on_message(0, p.to_message())
        else:
            self.link.send(p.to_message())


class _CycleCapture:
    """One armed cycle on one rank: record each phase, then write its boundaries."""

    def __init__(self, plugin: CapturePlugin, arm: Arm, index: int):
        self.plugin = plugin
        self.arm = arm
        self.k = index - arm.start
        self.phases: dict[str, PhaseRecorder] = {}
        self.wanted = {p.name for p in arm.geometry.phases}
        if plugin._progress is None or plugin._progress.capture != arm.capture:
            plugin._progress = RankProgress(arm.capture, plugin.rank, len(arm.geometry.boundaries()) * arm.cycles)
        self.progress = plugin._progress

    def __enter__(self):
        if self.k == 0:
            self.plugin._probe_results = self._run_probes() if self.plugin.probe is not None else []
        self.probes = self.plugin._probe_results
        self.t0 = time.perf_counter()
        self.plugin._active = self
        self.progress.state = "capturing"
        return self

    def _run_probes(self) -> list:
        """Order- and rounding-revealing all-reduces of every (size, dtype) the cycle reduces, through the
        service's own TP all-reduce, before its first armed cycle (every rank does the same ones)."""
        from ..contracts.probe import KINDS, MAX_RANKS, probe_input
        from ..corpus.manifest import dtype_of
        g = self.arm.geometry
        if not 2 <= g.ranks <= MAX_RANKS:
            return []
        out = []
        for n in sorted({ph.rows * g.hidden for ph in g.phases}):
            for kind in KINDS:
                x = probe_input(g.ranks, self.plugin.rank, n, dtype_of(g.reduce_dtype), kind)
                try:
                    y = self.plugin.probe(x)
                except Exception as e:  # never into the service: the capture reports it
                    self.progress.skipped.append(f"probe {kind} n={n}: {type(e).__name__}: {e}")
                    return []
                out.append((kind, n, g.reduce_dtype, y))
        return out

    def phase(self, name: str):
        if name not in self.wanted:
            return NULL
        rec = _ActivePhase(self.plugin, PhaseRecorder(name, self.arm.geometry.ranks, self.plugin.group))
        self.phases[name] = rec.recorder
        return rec

    def __exit__(self, exc_type, exc, tb):
        self.plugin._active = None
        p = self.progress
        p.cycle_ms.append((time.perf_counter() - self.t0) * 1e3)
        try:
            if exc_type is not None:
                raise CaptureError(f"the service failed inside the armed cycle ({exc_type.__name__}: {exc})")
            t1 = time.perf_counter()
            self._write()
            p.write_ms.append((time.perf_counter() - t1) * 1e3)
            last = self.k == self.arm.cycles - 1
            p.state = "done" if last else "armed"
        except Exception as e:  # a capture failure must not take the service down
            p.state = "error"
            p.error = str(e) if isinstance(e, CaptureError) else f"{type(e).__name__}: {e}"
            last = True
        if last and self.plugin._arm is self.arm:
            self.plugin._arm = None
        self.plugin.report(p)
        return False

    def _write(self) -> None:
        g = self.arm.geometry
        p = self.progress
        p.state = "writing"
        reuse = Path(self.arm.targets[self.k]) if self.arm.targets else None
        writer = Corpus(Path(self.arm.corpora[self.k]), CorpusInfo(g), reuse)
        for ph in g.phases:
            rec = self.phases.get(ph.name)
            if rec is None:
                raise CaptureError(f"the armed cycle ran no {ph.name} phase (is capture.phase({ph.name!r}) marked?)")
            if rec.errors:
                raise CaptureError(f"{ph.name} phase: recording failed: {rec.errors[0]}")
            p.skipped.extend(rec.skipped[:4])
            for b, tensors in assemble(g, ph, rec.events):
                writer.write(b, self.plugin.rank, tensors, {"capture": self.arm.capture, "cycle": self.k})
                p.written += 1
                self.plugin.report(p)
        for kind, n, dtype, y in self.probes:  # in every cycle's corpus, listed once
            digest, _ = writer.blobs.put(y.tobytes())
            if self.k == 0:
                p.probes.append({"kind": kind, "n": n, "dtype": dtype, "out": digest})
        p.blobs_new += writer.new_blobs
        p.blobs_reused += writer.reused_blobs


class _ActivePhase:
    def __init__(self, plugin: CapturePlugin, recorder: PhaseRecorder):
        self.plugin = plugin
        self.recorder = recorder

    def __enter__(self):
        self.recorder.__enter__()
        self.plugin._recorder = self.recorder
        return self.recorder

    def __exit__(self, *exc):
        self.plugin._recorder = None
        return self.recorder.__exit__(*exc)
