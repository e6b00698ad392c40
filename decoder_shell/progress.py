"""Progress for the steps that take more than a second (synth, bind, verify, replay epochs, gate
blocks), as rich bars on a terminal; nothing when stdout is not a terminal or with -q.

The library functions take a plain callable `progress(kind, ...)`; a Tracker is one, so they stay
free of any display code. With -v every finished step also prints one detail line on stderr
(count and seconds), and epoch callbacks that carry an EpochResult print its per-rank times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


@dataclass
class _Step:
    label: str
    total: int
    done: int = 0
    started: float = field(default_factory=time.perf_counter)
    task: int | None = None


class Tracker:
    """Callable progress sink: declare steps with expect(kind, total, label), then call tracker(kind, ...)."""

    def __init__(self, console: Console, *, quiet: bool = False, verbose: bool = False):
        self.enabled = console.is_terminal and not quiet
        self.verbose = verbose
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=True, disable=not self.enabled)
        self.steps: dict[str, _Step] = {}
        self.last = time.perf_counter()  # the previous callback: where the next step's time starts

    def __enter__(self):
        self.last = time.perf_counter()
        self.bar.start()
        return self

    def __exit__(self, *exc):
        self.bar.stop()

    def expect(self, kind: str, total: int, label: str) -> "Tracker":
        self.steps[kind] = _Step(label, total)
        return self

    def hook(self, kind: str):
        """A one-argument callback (synth's and bind's `progress(cmd)`) that advances `kind`."""
        return lambda *_: self(kind)

    def __call__(self, kind: str, index=None, detail=None) -> None:
        step = self.steps.get(kind)
        if step is None:
            return
        if step.task is None:
            step.started = self.last  # steps run one after another: this one began when the last ended
            step.task = self.bar.add_task(step.label, total=step.total)
        step.done += 1
        self.last = time.perf_counter()
        self.bar.advance(step.task)
        if self.verbose and detail is not None:
            self.err.print(f"  {kind} {index}: {_detail(detail)}", markup=False)
        if step.done == step.total:
            self.bar.update(step.task, visible=False)
            if self.verbose:
                self.err.print(f"{step.label}: {step.done} in {time.perf_counter() - step.started:.2f} s",
                               markup=False)


def _detail(d) -> str:
    """An EpochResult as one line (per-rank ms and mismatching elements); anything else as str()."""
    times = getattr(d, "times_ms", None)
    if times is None:
        return str(d)
    bad = sum(d.mismatches)
    return (" ".join(f"{t:.3f}" for t in times) + " ms per rank, "
            + ("exact" if not bad else f"{bad} mismatching elements"))
