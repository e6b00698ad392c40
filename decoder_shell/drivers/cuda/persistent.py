"""The persistent cycle: every emulated rank's whole cycle as one resident cooperative kernel.

Instead of a graph of ~1,000 nodes, one kernel (persistent.cu, on top of the device
functions of kernels.py's SOURCE) walks the step list (steps.py) from device memory, the steps separated by grid barriers
on a 64-bit counter that only grows. The grid is sized to be co-resident (occupancy API) and launched
cooperatively, so a barrier cannot wait on a block that never started; where the device cannot hold
it the load is refused with one line. A barrier that does not complete within the watchdog timeout
ends the launch and the run fails with one line naming the step. Buffers, poisoning, writes and
reads are the graph session's (same arenas, same addresses), so every check runs unchanged.
"""

from __future__ import annotations

import ctypes as C
import os
from pathlib import Path

import numpy as np

from ...commands.program import Cycle
from ...errors import MismatchError, UsageError
from ..base import device_hung
from . import steps as S
from .nvrtc import EXACT_FLAGS, FMA_FLAGS, compile_cubin
from .kernels import SOURCE, sinkhorn_flags
from .session import CudaSession

PERSISTENT_SOURCE = (Path(__file__).with_name("persistent.cu")).read_text()
#: Watchdog: a barrier not complete after this long ends the launch (DECODER_SHELL_CUDA_WATCHDOG_MS).
WATCHDOG_MS = 2000.0


def late_flags() -> tuple[str, ...]:
    """DECODER_SHELL_CUDA_PERSIST_LATE=1: a unit requests its weights after post and comb are made
    (persistent.cu PERSIST_LATE_WEIGHTS; only when loads are issued changes, not a value)."""
    return ("-DPERSIST_LATE_WEIGHTS=1",) if os.environ.get("DECODER_SHELL_CUDA_PERSIST_LATE", "0") == "1" else ()


def source(opg: int, q: int) -> tuple[str, str]:
    entry = f"persistent_o{opg}_q{q}"
    wrapper = (f'extern "C" __global__ void __launch_bounds__({S.BLOCK}, 2) {entry}(const PArgs p) '
               f'{{ persistent_cycle<{opg}, {q}>(p); }}\n')
    return SOURCE + PERSISTENT_SOURCE + wrapper, entry


def fast_q(hidden: int) -> int:
    """D / 1024 where each lane's stream values stay in registers (as the graph kernels), else 0."""
    return hidden // 1024 if hidden % 1024 == 0 and hidden // 1024 <= 8 else 0


class PersistentSession(CudaSession):
    """The graph session's buffers, with one cooperative kernel instead of the graph."""

    #: No node-by-node timing (replay --breakdown refuses with one line): one kernel has no nodes;
    #: tools/persistent_profile.py times its steps instead.
    profile = None
    #: How launch() times a launch unless DECODER_SHELL_CUDA_PERSIST_TIMING says: "graph", events that are nodes of
    #: a one-kernel graph around it, as the graph path's events are; "direct", events recorded around a direct launch
    #: (the host's launch call inside the time). Graph for both kernels: exact, and the host's call out of the time
    #: (H100; the cluster cycle's, twenty-ninth session: 10-15 us of a direct launch's; the cooperative node's,
    #: thirtieth session: TP4 M=2 1.399 against 1.410 ms; docs/BENCHMARKS.md).
    TIMING = "graph"

    def __init__(self, drv, cycle: Cycle, *, rank: int | None = None, fma: bool = False, flags: bool = False,
                 blocks: int | None = None, watchdog_ms: float | None = None, skip_step: int = -1):
        """rank=None: every rank emulated here. rank=r: rank r's kernel (one process per rank); call
        attach_peers() then build(): its all-reduces meet the peers' through epoch-tagged arrival slots.
        flags: steps ordered by (rank, row) counters instead of grid barriers (a unit waits only for
        the units that made its row)."""
        super().__init__(drv, cycle, None, rank=rank, build=False)
        self.ev_a = self.ev_b = None
        self.launch_graph = None  # [graph, exec, kernel node, its parameters] of the timed launch (_graph_launch)
        self.flags, self.tag = flags, 0
        self._opts = (drv, fma, blocks, watchdog_ms, skip_step)
        if rank is None:
            self.build()

    def build(self):
        missing = sorted(set(range(self.cycle.ranks)) - set(self.mem.base))
        if missing:
            raise UsageError(f"rank {self.rank}: peers {missing} not attached (attach_peers before build)")
        try:
            self._build_persistent(*self._opts)
        except BaseException:
            self.close()
            raise

    def _build_persistent(self, drv, fma, blocks, watchdog_ms, skip_step):
        cu, cycle = self.cu, self.cycle
        self.rank0, self.nlocal = (0, cycle.ranks) if self.rank is None else (self.rank, 1)
        self.skip_step = skip_step
        self.watchdog_ms = float(watchdog_ms or os.environ.get("DECODER_SHELL_CUDA_WATCHDOG_MS", WATCHDOG_MS))
        self.plan = S.plan(cycle)
        if self.flags and any(st.kind != "mhc" for st in self.plan):
            raise UsageError("persistent-flags orders steps by the rows of mHC boundaries; this cycle has an "
                             "all-reduce no boundary folds in (use persistent)")
        self.broken = ""
        self.trace = False
        self.opg = S.outputs_per_unit(cycle)
        src, self.entry = source(self.opg, fast_q(cycle.geometry.hidden))
        flags = (*(FMA_FLAGS if fma else EXACT_FLAGS), *sinkhorn_flags(), *late_flags())
        mod = self.modules._load(compile_cubin(src, self.arch, flags, name="persistent.cu"))
        self.func = cu.cuModuleGetFunction(mod, self.entry.encode())
        attr = cu.bindings.CUdevice_attribute
        if not cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, drv.device):
            raise UsageError(f"persistent cycle: {drv.gpu} has no cooperative launch")
        sms = int(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, drv.device))
        per_sm = int(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.func, S.BLOCK, 0))
        resident = sms * per_sm
        want = (blocks or int(os.environ.get("DECODER_SHELL_CUDA_PERSIST_BLOCKS", "0") or 0)
                or min(resident, S.max_items(cycle, self.plan, self.nlocal)))
        if want > resident or resident == 0:
            raise UsageError(f"persistent cycle: {drv.gpu} holds {resident} blocks of {self.entry} at once "
                             f"({per_sm} per SM x {sms} SMs); the grid needs {want}")
        self.blocks = want
        # the step table, then the control words: barrier counter, error flag, trace stamps
        arrival = None
        if self.rank is not None:  # the graph path's all-reduce slots: this rank's in every rank's work arena
            R, me, mem = cycle.ranks, self.rank, self.mem
            arrival = lambda i: ([mem.work(q, mem.slots[i]) + 8 * me for q in range(R)], mem.work(me, mem.slots[i]))  # noqa: E731
        table = S.encode(cycle, self.plan, self.addr, lambda r, i: self.mem.work(r, self.mem.scratch[i]), arrival)
        self.table_ptr = self._alloc(C.sizeof(table))
        n = len(self.plan) + 1
        self.detail_off = 256 + 8 * n
        self.rows_off = self.detail_off + 64 * n
        R = cycle.ranks
        row_counts = [R * cycle.geometry.phase(cycle.commands[st.cmd].boundary.phase).rows for st in self.plan]
        ctl_bytes = self.rows_off + 8 * sum(row_counts)  # barrier, error, trace, detail, row counters
        self.ctl = self._alloc(ctl_bytes)
        cu.cuMemsetD8(self.ctl, 0, ctl_bytes)
        off = self.rows_off
        for k, cnt in enumerate(row_counts):  # each step's [rank][row] counters
            table[k].rows_done = self.ctl + off
            off += 8 * cnt
        cu.cuMemcpyHtoD(self.table_ptr, C.addressof(table), C.sizeof(table))
        self.ev_a, self.ev_b = cu.cuEventCreate(0), cu.cuEventCreate(0)

    def _alloc(self, nbytes: int) -> int:
        """Device memory freed with the arenas (Arenas.free releases everything in `owned`)."""
        ptr = int(self.cu.cuMemAlloc(nbytes))
        self.mem.owned.append(ptr)
        return ptr

    def _args(self, mode: int = 0) -> S.PArgs:
        p = S.PArgs()
        p.steps, p.nsteps, p.ranks = self.table_ptr, len(self.plan), self.cycle.ranks
        p.bar, p.err = self.ctl, self.ctl + 64
        p.timeout_ns = int(self.watchdog_ms * 1e6)
        p.trace = self.ctl + 256 if self.trace else 0
        p.detail = self.ctl + self.detail_off if self.trace else 0
        p.sync = int(self.flags and mode == 0)
        p.tag = self.tag + 1 if p.sync else 0
        p.mode, p.skip_step = mode, self.skip_step
        p.rank0, p.nlocal = self.rank0, self.nlocal
        return p

    def launch(self, mode: int = 0, timing: str | None = None) -> float:
        """One launch; device ms between events around it. Raises after a watchdog stop.

        timing (else DECODER_SHELL_CUDA_PERSIST_TIMING, else the class's TIMING) "graph": the events are nodes of a one-kernel graph (event, kernel, event), as the graph
        path's are, so the time is the launch's own and never the host's work of submitting it. "direct":
        events recorded around a direct launch; on an idle stream the first one is recorded before the
        host has submitted the kernel, so the time also holds the host's launch call (cuda-python builds
        the configuration, the driver submits it), which the graph path's time does not."""
        if self.broken:
            raise MismatchError(self.broken)
        cu = self.cu
        p = self._args(mode)
        params = (C.c_void_p * 1)(C.addressof(p))
        timing = timing or os.environ.get("DECODER_SHELL_CUDA_PERSIST_TIMING", self.TIMING)
        if timing not in ("graph", "direct"):
            raise UsageError(f"DECODER_SHELL_CUDA_PERSIST_TIMING={timing!r}: graph or direct")
        if timing == "direct":
            cu.cuEventRecord(self.ev_a, self.stream)
            self._start(params)
            cu.cuEventRecord(self.ev_b, self.stream)
        else:
            self._graph_launch(params)
        self._launched(p)
        self.finish("the persistent cycle's launch")  # its watchdog ends a barrier wait; the deadline anything else
        err = np.zeros(1, dtype=np.int32)
        cu.cuMemcpyDtoH(err.ctypes.data, self.ctl + 64, 4)
        if err[0]:
            self.broken = self._stopped(int(err[0]) - 1)
            raise MismatchError(self.broken)
        return float(cu.cuEventElapsedTime(self.ev_a, self.ev_b))

    def _node(self):
        """The kernel's launch: function, grid, block, dynamic shared memory, and its launch attributes
        as (id, value) pairs (here: cooperative, so every block is co-resident)."""
        b = self.cu.bindings
        v = b.CUkernelNodeAttrValue()
        v.cooperative = 1
        return self.func, self.blocks, S.BLOCK, 0, [(b.CUkernelNodeAttrID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE, v)]

    def _start(self, params) -> None:
        """The launch itself, direct (DECODER_SHELL_CUDA_PERSIST_TIMING=direct)."""
        self.cu.cuLaunchCooperativeKernel(self.func, self.blocks, 1, 1, S.BLOCK, 1, 1, 0, self.stream,
                                          C.addressof(params))

    def _graph_launch(self, params) -> None:
        """The launch as the graph (ev_a, kernel, ev_b): made and instantiated at the first launch, its
        kernel node's arguments set before every later one (the attributes stay the node's)."""
        cu = self.cu
        if self.launch_graph is None:
            b = cu.bindings
            func, grid, block, shared, attrs = self._node()
            kp = b.CUDA_KERNEL_NODE_PARAMS()
            kp.func = func
            kp.gridDimX, kp.gridDimY, kp.gridDimZ = grid, 1, 1
            kp.blockDimX, kp.blockDimY, kp.blockDimZ = block, 1, 1
            kp.sharedMemBytes = shared
            kp.kernelParams = C.addressof(params)
            g = cu.cuGraphCreate(0)
            self.launch_graph = [g, None, None, kp]  # (freed by close() from here on)
            a = cu.cuGraphAddEventRecordNode(g, [], 0, self.ev_a)
            node = cu.cuGraphAddKernelNode(g, [a], 1, kp)
            for key, value in attrs:
                cu.cuGraphKernelNodeSetAttribute(node, key, value)
            cu.cuGraphAddEventRecordNode(g, [node], 1, self.ev_b)
            self.launch_graph[1:3] = [cu.cuGraphInstantiate(g, 0), node]
        else:
            _, ex, node, kp = self.launch_graph
            kp.kernelParams = C.addressof(params)
            cu.cuGraphExecKernelNodeSetParams(ex, node, kp)
        cu.cuGraphLaunch(self.launch_graph[1], self.stream)

    def _launched(self, p) -> None:
        """What a submitted launch changes on the host."""
        if p.sync:
            self.tag += 1  # every row counter grew by its units: the next launch waits for the next multiple

    def _stopped(self, step: int) -> str:
        """The one line of a launch the watchdog ended at `step`."""
        done = np.zeros(1, dtype=np.uint64)
        self.cu.cuMemcpyDtoH(done.ctypes.data, self.ctl, 8)
        who = "" if self.rank is None else f"rank {self.rank}: "
        return (f"{who}persistent cycle: step {step} ({self._step_name(step)}) waited more than "
                f"{self.watchdog_ms:g} ms for the grid barrier or a rank's arrival (barrier count "
                f"{int(done[0])}, {self.blocks} blocks); the launch was ended by the watchdog")

    def _step_name(self, k: int) -> str:
        if not 0 <= k < len(self.plan):
            return "tail"
        return self.cycle.commands[self.plan[k].cmd].boundary.name

    def run(self, graph=True):
        return [self.launch()] * self.cycle.ranks

    def step_times(self, mode: int = 0) -> list[float]:
        """One launch with %globaltimer stamps at each step start: ms per step (barrier wait included);
        mode 1: of the launch doing only its synchronization."""
        self.trace = True
        try:
            self.launch(mode)
        finally:
            self.trace = False
        return list(np.diff(self.trace_stamps()) / 1e6)

    def trace_stamps(self, extra: int = 0) -> np.ndarray:
        """The last traced launch's %globaltimer stamps, ns: each step's start, the end, then `extra` more
        (the cluster cycle's block 0 entry and prologue pieces: CL_ENTRY_STAMP)."""
        t = np.zeros(len(self.plan) + 1 + extra, dtype=np.uint64)
        self.cu.cuMemcpyDtoH(t.ctypes.data, self.ctl + 256, t.nbytes)
        return t.astype(np.int64)

    #: stamps a step in the detail trace (the kernel's own layout)
    DETAIL_SLOTS = 8

    def _detail(self, mode: int, blocks: int) -> np.ndarray:
        """One traced launch's stamps inside each step, [steps + 1][blocks][DETAIL_SLOTS] ns (0 where not taken),
        for a kernel that stamps `blocks` blocks."""
        d = np.zeros((len(self.plan) + 1, blocks, self.DETAIL_SLOTS), dtype=np.uint64)
        self.cu.cuMemsetD8(self.ctl + self.detail_off, 0, d.nbytes)
        self.step_times(mode)
        self.cu.cuMemcpyDtoH(d.ctypes.data, self.ctl + self.detail_off, d.nbytes)
        return d

    def step_detail(self, mode: int = 0) -> np.ndarray:
        """One traced launch: block 0's stamps inside each step, [steps + 1][DETAIL_SLOTS] ns (0 where not
        taken); the persistent kernel's: 0 start, 1 first unit, 2 loads and post/comb, 3 stream values, 4 dot
        products, 5 partials, 6 items done."""
        return self._detail(mode, 1)[:, 0]

    def barrier_ms(self, reps: int = 20) -> float:
        """Median launch time of the same grid doing only its barriers, per barrier."""
        times = sorted(self.launch(mode=1) for _ in range(reps))
        return times[len(times) // 2] / len(self.plan)

    @property
    def node_count(self) -> int:
        return 1

    def close(self):
        if self._freed or device_hung():  # after a hang nothing may wait for the device (errors.KernelHang)
            return
        try:
            self.finish("the persistent cycle's last launch")
            if getattr(self, "launch_graph", None) is not None:
                g, ex = self.launch_graph[:2]
                if ex is not None:
                    self.cu.cuGraphExecDestroy(ex)
                self.cu.cuGraphDestroy(g)
                self.launch_graph = None
            for ev in (getattr(self, "ev_a", None), getattr(self, "ev_b", None)):
                if ev is not None:
                    self.cu.cuEventDestroy(ev)
            self.ev_a = self.ev_b = None
        finally:
            super().close()
