"""Cycle programs: fixed buffers and an ordered command list per rank (DESIGN.md 6).

The structure comes from the geometry alone: every op output gets its own buffer; an op input that
an earlier op of the same phase produced reads that op's buffer (the cycle stays linked); every
other input (params, and the partial sums whose matmuls are not replayed) gets a buffer filled by an
inject (copy) command outside the timed region. Every rank has the same layout, so buffer and command
indices mean the same thing on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..contracts.allreduce import RingContract
from ..contracts.moe import fused_combine
from ..contracts.numerics import dtype_of
from ..geometry import Boundary, Geometry
from . import ops


@dataclass(frozen=True)
class Buffer:
    id: int
    boundary: Boundary  # the boundary whose tensor defines it (producer, or consumer if injected)
    tensor: str
    kind: str  # "param" | "input" (injected) | "output"
    dtype: np.dtype
    shape: tuple

    @property
    def name(self) -> str:
        return f"{self.boundary.name}.{self.tensor}"

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize


@dataclass(frozen=True)
class Command:
    index: int
    boundary: Boundary
    inputs: dict  # tensor name -> buffer id (inputs and params)
    outputs: dict  # tensor name -> buffer id

    @property
    def op(self) -> str:
        return self.boundary.op


@dataclass
class Cycle:
    """One cycle's program, identical in layout on every rank."""

    geometry: Geometry
    contract: RingContract
    buffers: list[Buffer] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)

    @property
    def ranks(self) -> int:
        return self.geometry.ranks

    def injected(self) -> list[Buffer]:
        return [b for b in self.buffers if b.kind != "output"]

    def outputs(self) -> list[Buffer]:
        return [b for b in self.buffers if b.kind == "output"]

    def tensor_buffers(self, cmd: Command) -> dict[str, int]:
        return {**cmd.inputs, **cmd.outputs}


def build_cycle(g: Geometry, contract: RingContract) -> Cycle:
    cyc = Cycle(g, contract)
    for phase in g.phases:
        bounds = phase.boundaries()
        produced: dict[tuple[int, str], int] = {}
        for b in bounds:
            linked = ops.links(b, bounds)
            ins, outs = {}, {}
            for spec in ops.op_tensors(b, g):
                if spec.role == "output":
                    buf = _add(cyc, b, spec, "output")
                    outs[spec.name] = buf
                    produced[(b.index, spec.name)] = buf
                elif spec.name in linked:
                    ins[spec.name] = produced[linked[spec.name]]
                else:
                    ins[spec.name] = _add(cyc, b, spec, "param" if spec.role == "param" else "input")
                    # an injected input a later op links to (mhc_pre_streams' streams feed the next hc_post)
                    produced.setdefault((b.index, spec.name), ins[spec.name])
            cyc.commands.append(Command(len(cyc.commands), b, ins, outs))
    return cyc


def _add(cyc: Cycle, b: Boundary, spec: ops.TensorSpec, kind: str) -> int:
    buf = Buffer(len(cyc.buffers), b, spec.name, kind, dtype_of(spec.dtype), spec.shape)
    cyc.buffers.append(buf)
    return buf.id


#: Variants that replace a command by a different contract (not an implementation of the same one):
#: `fused` on `moe_combine_official` runs the fused combine mode instead of the exact-official chain.
CONTRACT_VARIANTS = {"fused": ("moe_combine_official",)}


def producer(cyc: Cycle, buffer_id: int) -> Command:
    """The command that writes `buffer_id`."""
    return next(c for c in cyc.commands if buffer_id in c.outputs.values())


def official_feeds(cyc: Cycle, cmd: Command) -> tuple[Command, Command]:
    """The two all-reduces a moe_combine_official reads: (per-slot partials, shared partial)."""
    return producer(cyc, cmd.inputs["slots"]), producer(cyc, cmd.inputs["shared"])


def elided_by(cyc: Cycle, variants: dict) -> set[int]:
    """Commands a contract variant makes redundant: the fused combine sums the partials itself, so the
    two all-reduces of the official chain do not run (their outputs stay unwritten)."""
    out = set()
    for i, v in variants.items():
        if v == "fused" and cyc.commands[i].op == "moe_combine_official":
            out.update(c.index for c in official_feeds(cyc, cyc.commands[i]))
    return out


def run_fused_combine(cyc: Cycle, cmd: Command, values: list[dict[int, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The fused combine in place of an exact-official chain: every rank's slot and shared partials
    (the inputs of the chain's two all-reduces) summed per rank in fp32, one fp32 all-reduce, one
    bf16 rounding (contracts.moe.fused_combine); the same bf16 [M, D] on every rank."""
    slots_ar, shared_ar = official_feeds(cyc, cmd)
    out = fused_combine([v[slots_ar.inputs["x"]] for v in values], [v[shared_ar.inputs["x"]] for v in values],
                        values[0][cmd.inputs["ids"]], cyc.contract)
    return [{"out": out} for _ in values]


def run_command(cyc: Cycle, cmd: Command, values: list[dict[int, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """Run one command's contract on every rank; returns each rank's named outputs."""
    if cmd.op == "allreduce":
        out = ops.run_allreduce([v[cmd.inputs["x"]] for v in values], cyc.contract)
        return [{"out": out} for _ in values]
    return [ops.run_local(cmd.op, {k: v[i] for k, i in cmd.inputs.items()}, cyc.geometry) for v in values]


def reference(cyc: Cycle, injected: list[dict[int, np.ndarray]]) -> list[dict[int, np.ndarray]]:
    """Run the whole cycle through the contracts from the injected values; returns every buffer per rank."""
    values = [dict(v) for v in injected]
    for cmd in cyc.commands:
        for v, outs in zip(values, run_command(cyc, cmd, values)):
            for name, bid in cmd.outputs.items():
                v[bid] = outs[name]
    return values
