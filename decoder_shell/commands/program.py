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
