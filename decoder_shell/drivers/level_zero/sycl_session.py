"""The SYCL path: dpctl queue, USM device allocations made once, SPIR-V program, timed submissions.

A Target (one device: its in-order profiling queue and the program built from SPIR-V) is made once
per driver and shared by its sessions. Every launch of a session's plan is resolved to (kernel,
argument list, ranges) at load, so an epoch only submits. Times come from the queue's profiling
events: each launch's device start..end.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ...commands.program import Cycle
from ...errors import BuildError, DriverUnavailable
from ..base import Session
from . import plan as planning
from . import spirv

_SCALARS = {"u32": ctypes.c_uint32, "i32": ctypes.c_int32, "f32": ctypes.c_float, "u64": ctypes.c_uint64}


class Target:
    """One device with its queue and kernels, built once (building the program takes seconds)."""

    def __init__(self, device):
        import dpctl
        import dpctl.program

        self.device = device
        self.queue = dpctl.SyclQueue(device, property=["in_order", "enable_profiling"])
        limit = device.max_work_group_size
        while True:
            self.group = planning.group_size(limit)
            self.spirv = spirv.build(planning.LANES // self.group)
            try:
                self.program = dpctl.program.create_program_from_spirv(self.queue, self.spirv, spirv.RUNTIME_OPTIONS)
            except dpctl.program.SyclProgramCompilationError as e:
                raise BuildError(f"{device.name} cannot build the level-zero kernels: {e}") from None
            # a kernel may allow fewer work-items than the device (registers): rebuild for that size
            fit = min(self.program.get_sycl_kernel(k).work_group_size for k in planning.GROUP_KERNELS)
            if fit >= self.group:
                break
            limit = fit


class SyclSession(Session):
    timing_meaningful = True

    def __init__(self, cycle: Cycle, target: Target, variants: dict | None = None):
        import dpctl.memory

        self.cycle, self.target = cycle, target
        self.queue, self.group, self.program = target.queue, target.group, target.program
        self.plan = planning.build_plan(cycle, self.group, variants)
        # One allocation per buffer id, every rank's copy back to back; never freed or moved until close.
        try:
            self.mem = [dpctl.memory.MemoryUSMDevice(max(b.nbytes, 1) * cycle.ranks, queue=self.queue)
                        for b in cycle.buffers]
        except dpctl.memory.USMAllocationError as e:
            need = sum(b.nbytes for b in cycle.buffers) * cycle.ranks
            raise DriverUnavailable(f"{self.target.device.name} cannot hold the cycle's {need / 2**20:.0f} MiB "
                                    f"of buffers: {e}") from None
        self._outputs = [self.mem[b.id] for b in cycle.outputs()]
        # MoE launches: staging of h per (command, rank) and the ml_dtypes decode tables (moe_plan.py)
        self.scratch = {a.value[:3]: dpctl.memory.MemoryUSMDevice(max(a.value[3], 1), queue=self.queue)
                        for l in self.plan for a in l.args if a.kind == "scratch"}
        self.tables = None
        if any(a.kind == "tables" for l in self.plan for a in l.args):
            from ...contracts.quant import decode_tables
            t = decode_tables()
            self.tables = dpctl.memory.MemoryUSMDevice(t.nbytes, queue=self.queue)
            self.tables.copy_from_host(t.view(np.uint8))
        kernels = {name: self.program.get_sycl_kernel(name) for name in {l.kernel for l in self.plan}}
        self.launches = [(kernels[l.kernel], [self._arg(a) for a in l.args], [l.global_size], [l.local_size])
                         for l in self.plan]

    def _arg(self, a: planning.Arg):
        if a.kind == "view":
            return self._view(a.value[1], a.value[0])
        if a.kind == "scratch":
            return self.scratch[a.value[:3]]
        if a.kind == "tables":
            return self.tables
        return self.mem[a.value] if a.kind == "buffer" else _SCALARS[a.kind](a.value)

    def _view(self, rank: int, buffer_id: int):
        """A dpctl view of one rank's slice of a buffer (a fixed address inside the allocation)."""
        import dpctl.memory

        b = self.cycle.buffers[buffer_id]
        base = self.mem[buffer_id]
        ptr = base._pointer + rank * b.nbytes
        iface = {"data": (ptr, False), "shape": (b.nbytes,), "strides": None, "typestr": "|u1",
                 "version": 1, "syclobj": self.queue}
        return dpctl.memory.MemoryUSMDevice(_UsmView(iface, base))

    def write(self, rank, buffer_id, value):
        b = self.cycle.buffers[buffer_id]
        if not b.nbytes:
            return
        host = np.ascontiguousarray(np.asarray(value, dtype=b.dtype).reshape(b.shape))
        self._view(rank, buffer_id).copy_from_host(host.reshape(-1).view(np.uint8))

    def read(self, rank, buffer_id):
        b = self.cycle.buffers[buffer_id]
        out = np.empty(b.shape, dtype=b.dtype)
        if b.nbytes:
            self._view(rank, buffer_id).copy_to_host(out.reshape(-1).view(np.uint8))
        return out

    def poison(self):
        for m in self._outputs:
            m.memset(0xFF)  # all-ones: the NaN poison of base.POISON for 2- and 4-byte elements
        self.queue.wait()

    def run(self, graph=True):
        events = [self.queue.submit_async(k, args, g, l) for k, args, g, l in self.launches]
        self.queue.wait()
        durations = [(e.profiling_info_end - e.profiling_info_start) * 1e-6 for e in events]
        return planning.rank_times(self.cycle, self.plan, durations)

    def close(self):
        self.queue.wait()
        self.launches, self.mem, self._outputs = [], [], []


class _UsmView:
    """Exposes `__sycl_usm_array_interface__` for a slice; keeps the owning allocation alive."""

    def __init__(self, iface: dict, owner):
        self.__sycl_usm_array_interface__ = iface
        self._owner = owner
