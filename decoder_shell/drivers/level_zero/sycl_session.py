"""The SYCL path: dpctl queue, USM device allocations made once, SPIR-V program, timed submissions.

A Target (one device: its in-order profiling queue and the program built from SPIR-V) is made once
per driver and shared by its sessions. Every launch of a session's plan is resolved to (kernel,
argument list, ranges) at load, so an epoch only submits. Times come from the queue's profiling
events: each launch's device start..end.
"""

from __future__ import annotations

import numpy as np

from ...commands.program import Cycle
from ...errors import BuildError, DriverUnavailable
from ..base import Session, device_hung, wait_until
from . import plan as planning
from . import spirv


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
        # The arena: scratch regions of MoE launches (h and its codes and scales per command and rank)
        # and the ml_dtypes decode tables, at offsets fixed here (plan.arena; ze_session binds the same)
        self.layout = planning.arena(self.plan)
        self.arena = dpctl.memory.MemoryUSMDevice(max(self.layout.nbytes, 1), queue=self.queue)
        if "tables" in self.layout.regions:
            from ...contracts.quant import decode_tables
            self._at(planning.ARENA, *self.layout.regions["tables"]).copy_from_host(decode_tables().view(np.uint8))
        kernels = {name: self.program.get_sycl_kernel(name) for name in {l.kernel for l in self.plan}}
        self.launches = [(kernels[l.kernel], [self._arg(a) for a in l.args], [l.global_size], [l.local_size])
                         for l in self.plan]

    def allocation(self, space):
        """The device allocation of a buffer id or of planning.ARENA."""
        return self.arena if space == planning.ARENA else self.mem[space]

    def _arg(self, a: planning.Arg):
        where = planning.locate(self.cycle, self.layout, a)
        return planning.scalar(a) if where is None else self._at(*where)

    def _at(self, space, offset: int, nbytes: int):
        """A dpctl view of `nbytes` at `offset` inside an allocation (a fixed address for the session)."""
        import dpctl.memory

        base = self.allocation(space)
        if offset == 0 and nbytes == base.nbytes:
            return base
        iface = {"data": (base._pointer + offset, False), "shape": (nbytes,), "strides": None, "typestr": "|u1",
                 "version": 1, "syclobj": self.queue}
        return dpctl.memory.MemoryUSMDevice(_UsmView(iface, base))

    def _view(self, rank: int, buffer_id: int):
        """One rank's slice of a buffer."""
        return self._at(*planning.locate(self.cycle, self.layout, planning.Arg("view", (buffer_id, rank))))

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
        self.finish("the poisoning of the outputs")

    def run(self, graph=True):
        events = [self.queue.submit_async(k, args, g, l) for k, args, g, l in self.launches]
        wait_event(events[-1], "the cycle's launches")  # an in-order queue: the last one ends last
        durations = [(e.profiling_info_end - e.profiling_info_start) * 1e-6 for e in events]
        return planning.rank_times(self.cycle, self.plan, durations)

    def finish(self, what: str) -> None:
        """queue.wait() within the deadline (base.wait_until): a barrier event polled until complete."""
        finish_queue(self.queue, what)

    def close(self):
        if not device_hung():  # after a hang nothing may wait for the device
            self.queue.wait()
        self.launches, self.mem, self._outputs = [], [], []


def wait_event(event, what: str) -> None:
    """event.wait() within the deadline (dpctl's wait has none): its status polled by base.wait_until."""
    import dpctl

    complete = dpctl.event_status_type.complete
    wait_until(lambda: event.execution_status == complete, what)


def finish_queue(queue, what: str) -> None:
    """Everything submitted to `queue` done (a barrier event after it), or KernelHang at the deadline."""
    wait_event(queue.submit_barrier(), what)


class _UsmView:
    """Exposes `__sycl_usm_array_interface__` for a slice; keeps the owning allocation alive."""

    def __init__(self, iface: dict, owner):
        self.__sycl_usm_array_interface__ = iface
        self._owner = owner
