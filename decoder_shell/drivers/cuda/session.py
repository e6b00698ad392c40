"""A cycle's ranks on a GPU: buffers allocated once, one CUDA graph built node by node.

Emulated ranks (rank=None): all ranks' buffers live on one device; each rank is its own chain of
kernel nodes, joined only at collectives. One process per rank (rank=r): this session holds rank
r's buffers, maps its peers' through IPC handles, and its all-reduce kernels meet the peers'
through 64-bit epoch-tagged arrival slots in device memory (drivers/cuda/processes.py runs them).
Consecutive kernels of a chain are joined by programmatic edges where the device has them (sm_90+).
Event-record nodes at the head and tail of each rank's chain give per-rank device times. Epochs
only poison the outputs (memset, untimed), launch the graph and read.

The jobs live beside it: variants.py (which implementation each command gets), arenas.py (memory
and IPC), kernels.py (sources and NVRTC builds), launches.py (argument binding), graph.py (nodes
and edges). This class joins them and owns their lifetimes: whatever fails part way (a kernel that
does not compile, a peer that cannot be mapped), everything made so far is freed before the error
leaves the constructor or build().
"""

from __future__ import annotations

import numpy as np

from ...errors import UsageError
from ..base import Session, device_hung, wait_until
from . import graph as G
from .arenas import Arenas
from .kernels import Modules
from .launches import Binder
from .variants import resolve


class CudaSession(Session):
    timing_meaningful = True

    def __init__(self, drv, cycle, variants: dict | None, *, rank: int | None = None, pdl: bool = True,
                 build: bool = True):
        """rank=None: every rank emulated here. rank=r: only rank r; call attach_peers() then build()."""
        self.cu, self.cycle, self.arch, self.sm = drv.cu, cycle, drv.arch, drv.sm
        self.variants = resolve(cycle, variants, rank=rank, sm=self.sm)
        self.rank = rank
        self.local = list(range(cycle.ranks)) if rank is None else [rank]
        self.pdl = pdl and self.sm >= 90
        self._freed = False
        self.decodes, self.decode_inputs, self.stale = [], set(), False
        self.graph: G.Graph | None = None
        self.modules = Modules(self.cu, self.arch)
        self.mem = Arenas(self.cu, cycle, self.variants)
        self.stream = self.cu.cuStreamCreate(1)
        try:
            for r in self.local:
                self.mem.allocate(r)
            if build:
                self.build()
        except BaseException:
            self.close()
            raise

    def build(self):
        """Compile (or load cached) kernels and build the graph; every rank's arena must be known."""
        missing = sorted(set(range(self.cycle.ranks)) - set(self.mem.base))
        if missing:
            raise UsageError(f"rank {self.rank}: peers {missing} not attached (attach_peers before build)")
        try:
            self.modules.build(self.cycle, self.variants, self.sm)
            bind = Binder(self.cycle, self.mem, self.modules.funcs, self.sm, rank=self.rank)
            # `moe-expanded`: packed params decoded to bf16 on the device before the next epoch after a write
            self.decodes = [ln for idx in self.mem.expanded for r in self.local
                            for ln in bind.expand(self.cycle.commands[idx], r)]
            self.decode_inputs = {b for idx in self.mem.expanded for n, b in self.cycle.commands[idx].inputs.items()
                                  if n in ("w13", "s13", "w2", "s2", "w", "s")}
            self.stale = bool(self.decodes)
            self.graph = G.Graph(self.cu, self.pdl)
            G.build(self.graph, self.cycle, self.variants, bind, self.local, self.rank)
        except BaseException:
            self.close()
            raise

    # --- one process per rank -------------------------------------------------------------
    def export_handles(self) -> list[bytes]:
        return self.mem.export_handles(self.rank)

    def attach_peers(self, handles: dict[int, list[bytes]]):
        try:
            self.mem.attach_peers(handles)
        except BaseException:
            self.close()
            raise

    def addr(self, rank: int, bid: int) -> int:
        return self.mem.addr(rank, bid)

    # --- Session interface ------------------------------------------------------------------
    def _host(self, buffer_id, value) -> np.ndarray:
        b = self.cycle.buffers[buffer_id]
        return np.ascontiguousarray(np.asarray(value, dtype=b.dtype).reshape(b.shape))

    def write(self, rank, buffer_id, value):
        a = self._host(buffer_id, value)
        self.cu.cuMemcpyHtoD(self.mem.addr(rank, buffer_id), a.ctypes.data, a.nbytes)
        self.stale |= buffer_id in self.decode_inputs

    def decode(self):
        """Decode the packed weights of `moe-expanded` commands once more (untimed)."""
        for ln in self.decodes:
            self.cu.cuLaunchKernel(ln.func, *ln.grid, *ln.block, ln.shared, self.stream, ln.params_ptr, 0)
        self.finish("the weight decode")
        self.stale = False

    def read(self, rank, buffer_id):
        b = self.cycle.buffers[buffer_id]
        out = np.empty(b.shape, dtype=b.dtype)
        self.cu.cuMemcpyDtoH(out.ctypes.data, self.mem.addr(rank, buffer_id), out.nbytes)
        return out

    def set_expected(self, rank, buffer_id, value):
        """Expected output of a `copy` command (the gate hands these over before timing)."""
        if buffer_id not in self.mem.staging:
            return
        a = self._host(buffer_id, value)
        self.cu.cuMemcpyHtoD(self.mem.staged(rank, buffer_id), a.ctypes.data, a.nbytes)

    def poison(self):
        for r in self.local:
            self.cu.cuMemsetD8Async(self.mem.outputs(r), 0xFF, self.mem.out_size, self.stream)
        self.finish("the poisoning of the outputs")

    def run(self, graph=True):
        cu, g = self.cu, self.graph
        if self.stale:
            self.decode()
        if graph:
            cu.cuGraphLaunch(g.exec, self.stream)
            self.finish("the cycle's graph")
            return [float(cu.cuEventElapsedTime(g.ev_start[r], g.ev_end[r])) if r in g.ev_start else 0.0
                    for r in range(self.cycle.ranks)]
        cu.cuEventRecord(g.eager_start, self.stream)
        for ln in g.eager:
            cu.cuLaunchKernel(ln.func, *ln.grid, *ln.block, ln.shared, self.stream, ln.params_ptr, 0)
        cu.cuEventRecord(g.eager_end, self.stream)
        self.finish("the cycle's eager launches")
        t = float(cu.cuEventElapsedTime(g.eager_start, g.eager_end))
        return [t] * self.cycle.ranks

    def profile(self):
        """One epoch timed kernel by kernel, for replay --breakdown (drivers/cuda/profile.py)."""
        from .profile import profile_epoch
        if self.stale:
            self.decode()
        return profile_epoch(self)

    @property
    def node_count(self) -> int:
        return len(self.graph.launches)

    def finish(self, what: str) -> None:
        """cuStreamSynchronize within the deadline (base.wait_until; the driver's own wait has none),
        polled without sleeping for the first 5 ms."""
        wait_until(lambda: self.cu.stream_done(self.stream), what, spin_s=0.005)

    def close(self):
        """Free everything this session made, in reverse order of making; safe after a partial build.
        After a hang nothing is freed: every free would wait for the kernel that does not end."""
        if self._freed or device_hung():
            return
        self._freed = True
        cu = self.cu
        try:
            self.finish("the session's last work")
        finally:
            try:
                if self.graph is not None:
                    self.graph.destroy()
                self.mem.free()
                self.modules.unload()
            finally:
                cu.cuStreamDestroy(self.stream)
