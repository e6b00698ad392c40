"""The cpu driver: runs every command through its numpy contract. It is the reference; its times
measure numpy on the host, not a device, and say nothing about GPU speed.

It also knows a few candidate variants, so that the gate can be exercised end to end on any machine:
deletion bounds ("delete", "copy"), an exact but slower control ("twice") and two deliberately inexact
implementations ("fp32-accumulate", "numpy-exp") that a gate must catch.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ..commands import ops
from ..commands.program import Command, Cycle, elided_by, run_command, run_fused_combine
from ..contracts.quant import QuantInputError
from ..errors import UsageError
from ..geometry import DENSE_OPS, MOE_OPS
from .base import Driver, Session, poison_like

_MHC = ("mhc_pre", "mhc_pre_streams", "mhc_post_pre", "mhc_post_head")
_ALL = ("allreduce", *_MHC, *MOE_OPS, *DENSE_OPS)

#: Variant name -> (ops it applies to, one-line description). "baseline" is what unnamed commands run.
CPU_VARIANTS = {
    "baseline": (_ALL, "the numpy contract (what every command runs unless named)"),
    "delete": (_ALL, "skip the command: deletion-only upper bound"),
    "copy": (_ALL, "write the expected output instead of computing it: deletion bound that keeps the cycle linked"),
    "twice": (_ALL, "compute the command twice: exact but slower (a control for the gate)"),
    "fp32-accumulate": (("allreduce",), "all-reduce accumulated in fp32 and rounded once: inexact for bf16 at 3+ ranks"),
    "numpy-exp": (_MHC, "mHC with np.exp instead of the portable exp: inexact in some bits"),
    "fused": (("moe_combine_official",), "the fused MoE combine (per-rank fp32 slot sum, one fp32 all-reduce, one "
              "bf16 rounding) instead of the exact-official chain: a different contract"),
}


class CpuSession(Session):
    timing_meaningful = False
    profile_how = "cpu driver, host numpy time of each command computed for every rank"

    def __init__(self, cycle: Cycle, variants: dict | None):
        self.cycle = cycle
        self.variants = dict(variants or {})
        for idx, v in self.variants.items():
            _check_variant(cycle, idx, v)
        self.elided = elided_by(cycle, self.variants)  # the official chain's all-reduces under "fused"
        self.bufs = [{b.id: poison_like(b.shape, b.dtype) for b in cycle.buffers} for _ in range(cycle.ranks)]
        self.expected: list[dict[int, np.ndarray]] = [{} for _ in range(cycle.ranks)]
        self._outputs = cycle.outputs()

    def write(self, rank, buffer_id, value):
        dst = self.bufs[rank][buffer_id]
        np.copyto(dst, np.asarray(value, dtype=dst.dtype).reshape(dst.shape))

    def read(self, rank, buffer_id):
        return self.bufs[rank][buffer_id].copy()

    def set_expected(self, rank, buffer_id, value):
        """The value a "copy" command writes into this output buffer (handed over by the gate)."""
        buf = self.cycle.buffers[buffer_id]
        self.expected[rank][buffer_id] = np.asarray(value, dtype=buf.dtype).reshape(buf.shape).copy()

    def poison(self):
        for bufs in self.bufs:
            for b in self._outputs:
                np.copyto(bufs[b.id], poison_like(b.shape, b.dtype))

    def run(self, graph=True):
        # A deleted command leaves its outputs poisoned (NaN); what consumes them overflows quietly.
        with np.errstate(all="ignore"):
            return self._run()

    def profile(self) -> list[tuple[int, str, float]]:
        """One epoch, timed command by command: (command index, op, host ms for all ranks together)."""
        self.run()
        return list(self._nodes)

    def _run(self):
        times = [0.0] * self.cycle.ranks
        self._nodes = []
        for cmd in self.cycle.commands:
            variant = self.variants.get(cmd.index, "baseline")
            if variant == "delete" or cmd.index in self.elided:
                continue
            t0 = time.perf_counter()
            try:
                results = self._results(cmd, variant)
            except QuantInputError:
                if "delete" not in self.variants.values():
                    raise
                continue  # downstream of a deleted command: a MoE op refuses its poison; outputs stay poisoned
            if variant == "twice":
                results = self._results(cmd, variant)
            for bufs, outs in zip(self.bufs, results):
                for name, bid in cmd.outputs.items():
                    np.copyto(bufs[bid], outs[name])
            dt = (time.perf_counter() - t0) * 1e3
            self._nodes.append((cmd.index, cmd.op, dt))
            share = dt if cmd.op == "allreduce" else dt / self.cycle.ranks
            for r in range(self.cycle.ranks):
                times[r] += share
        return times

    def _results(self, cmd: Command, variant: str) -> list[dict[str, np.ndarray]]:
        if variant == "copy":
            return [self._expected_outputs(r, cmd) for r in range(self.cycle.ranks)]
        if variant == "fp32-accumulate":
            contract = dataclasses.replace(self.cycle.contract, accumulation="fp32")
            out = ops.run_allreduce([v[cmd.inputs["x"]] for v in self.bufs], contract)
            return [{"out": out} for _ in self.bufs]
        if variant == "fused":
            return run_fused_combine(self.cycle, cmd, self.bufs)
        if variant == "numpy-exp":
            g = self.cycle.geometry
            return [ops.run_mhc(cmd.op, {k: v[i] for k, i in cmd.inputs.items()}, g.mhc, g.hc, exp=np.exp)
                    for v in self.bufs]
        return run_command(self.cycle, cmd, self.bufs)

    def _expected_outputs(self, rank: int, cmd: Command) -> dict[str, np.ndarray]:
        try:
            return {name: self.expected[rank][bid] for name, bid in cmd.outputs.items()}
        except KeyError:
            raise UsageError(f"command {cmd.index} ({cmd.boundary.name}) runs 'copy' but no expected output "
                             f"was set for rank {rank} (call set_expected first)") from None


def _check_variant(cycle: Cycle, idx, variant) -> None:
    if not isinstance(variant, str):
        raise UsageError("cpu driver cannot run kernel candidates (use --driver cuda or level-zero)")
    if not isinstance(idx, int) or not 0 <= idx < len(cycle.commands):
        raise UsageError(f"cpu driver: no command {idx!r} in this cycle ({len(cycle.commands)} commands)")
    if variant not in CPU_VARIANTS:
        raise UsageError(f"cpu driver has no implementation {variant!r}; it offers {', '.join(CPU_VARIANTS)}")
    cmd = cycle.commands[idx]
    if cmd.op not in CPU_VARIANTS[variant][0]:
        raise UsageError(f"cpu variant {variant!r} applies to {', '.join(CPU_VARIANTS[variant][0])}, "
                         f"not {cmd.op} ({cmd.boundary.name})")


class CpuDriver(Driver):
    name = "cpu"

    def load(self, cycle, variants=None):
        return CpuSession(cycle, variants)

    def available_variants(self) -> dict[str, str]:
        """Candidate implementations this driver offers, name -> one-line description."""
        return {k: desc if ops_ == _ALL else f"{desc} (ops: {', '.join(ops_)})"
                for k, (ops_, desc) in CPU_VARIANTS.items() if k != "baseline"}

    def describe(self):
        return "cpu (numpy reference)"

    def versions(self) -> dict:
        import platform
        return {"runtime": f"numpy {np.__version__}", "processor": platform.processor() or platform.machine()}
