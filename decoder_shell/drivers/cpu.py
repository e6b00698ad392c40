"""The cpu driver: runs every command through its numpy contract. It is the reference; its times
measure numpy on the host, not a device, and say nothing about GPU speed."""

from __future__ import annotations

import time

import numpy as np

from ..commands.program import Cycle, run_command
from ..errors import UsageError
from .base import Driver, Session, poison_like

#: Variants the cpu driver knows: "delete" skips a command (deletion-only bound), "expected" copies
#: a precomputed expected output instead of computing it.
CPU_VARIANTS = ("baseline", "delete")


class CpuSession(Session):
    timing_meaningful = False

    def __init__(self, cycle: Cycle, variants: dict | None):
        self.cycle = cycle
        self.variants = variants or {}
        for idx, v in self.variants.items():
            if v not in CPU_VARIANTS:
                raise UsageError(f"cpu driver has no implementation {v!r} for command {idx}")
        self.bufs = [{b.id: poison_like(b.shape, b.dtype) for b in cycle.buffers} for _ in range(cycle.ranks)]
        self._outputs = cycle.outputs()

    def write(self, rank, buffer_id, value):
        dst = self.bufs[rank][buffer_id]
        np.copyto(dst, np.asarray(value, dtype=dst.dtype).reshape(dst.shape))

    def read(self, rank, buffer_id):
        return self.bufs[rank][buffer_id].copy()

    def poison(self):
        for bufs in self.bufs:
            for b in self._outputs:
                np.copyto(bufs[b.id], poison_like(b.shape, b.dtype))

    def run(self, graph=True):
        times = [0.0] * self.cycle.ranks
        for cmd in self.cycle.commands:
            if self.variants.get(cmd.index) == "delete":
                continue
            t0 = time.perf_counter()
            results = run_command(self.cycle, cmd, self.bufs)
            for bufs, outs in zip(self.bufs, results):
                for name, bid in cmd.outputs.items():
                    np.copyto(bufs[bid], outs[name])
            dt = (time.perf_counter() - t0) * 1e3
            share = dt if cmd.op == "allreduce" else dt / self.cycle.ranks
            for r in range(self.cycle.ranks):
                times[r] += share
        return times


class CpuDriver(Driver):
    name = "cpu"

    def load(self, cycle, variants=None):
        return CpuSession(cycle, variants)

    def describe(self):
        return "cpu (numpy reference)"
