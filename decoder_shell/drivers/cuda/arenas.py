"""Device memory of a session: per rank four arenas carved into fixed, aligned addresses, and the
IPC handles through which one process per rank maps its peers' arenas.

Arenas per rank: outputs (poisoned every epoch), state (injected inputs and params), work (kernel
scratch, block sync counters, all-reduce arrival slots, the epoch counter, the MoE decode tables;
zeroed once), staging (expected outputs that `copy` commands write), expanded (bf16 expert weights
of `moe-expanded` commands, decoded from the params on the device). Every allocation is recorded as it is made, so
free() releases exactly what exists, also after a constructor that failed half way.
"""

from __future__ import annotations

import ctypes as C

import numpy as np

from ...contracts.numerics import LANES
from ...contracts.quant import decode_tables
from ...geometry import DENSE_OPS, MOE_OPS
from .kernels import BLOCK, NOUT
from .moe import gate_scratch_bytes
from .variants import MAX_PIECES, Node, Variant

ALIGN = 256


def moe_scratch_bytes(cycle, cmd) -> dict[str, int]:
    """Kernel scratch of an expert command (moe_routed, moe_shared): bf16 h [slots, I/R] between w1/w3
    and w2, and its act_qdq codes and scales; of a gate, the split gate's sums and arrival counts
    (taken whichever gate kernel runs: a few KiB); other MoE commands need none."""
    g = cycle.geometry
    if cmd.op == "moe_gate":
        return gate_scratch_bytes(g.phase(cmd.boundary.phase).rows, g.moe.experts)
    if cmd.op not in ("moe_routed", "moe_shared"):
        return {}
    slots = g.phase(cmd.boundary.phase).rows * (g.moe.top_k if cmd.op == "moe_routed" else 1)
    width = g.moe.width // g.ranks
    return {"h": 2 * slots * width, "hc": slots * width, "hs": slots * width // 32}


def expanded_bytes(cycle, cmd) -> dict[str, int]:
    """bf16 bytes of an expert command's w13 and w2 decoded from its packed params (two nibbles a byte
    for MXFP4 routed experts, one code a byte for FP8 shared ones)."""
    if "w" in cmd.inputs:  # a dense projection: FP8 codes [G, N, K] -> bf16
        return {"w": 2 * cycle.buffers[cmd.inputs["w"]].nbytes}
    per = 2 if cmd.op == "moe_routed" else 1
    return {n: 2 * per * cycle.buffers[cmd.inputs[n]].nbytes for n in ("w13", "w2")}


class Arena:
    """One device allocation carved into aligned, fixed-address pieces."""

    def __init__(self):
        self.size = 0

    def take(self, nbytes: int) -> int:
        off = self.size
        self.size += -(-max(nbytes, 1) // ALIGN) * ALIGN
        return off


class Arenas:
    """The layout (offsets, same on every rank) and each rank's base addresses."""

    def __init__(self, cu, cycle, variants: dict):
        self.cu, self.cycle = cu, cycle
        outs, state, work = Arena(), Arena(), Arena()
        self.offsets = {b.id: (outs if b.kind == "output" else state).take(b.nbytes) for b in cycle.buffers}
        self.kinds = {b.id: b.kind for b in cycle.buffers}
        self.scratch, self.sync, self.slots = {}, {}, {}
        self.moe_scratch: dict[int, dict[str, int]] = {}  # expert commands: h, its codes and scales
        for cmd in cycle.commands:
            if cmd.op in MOE_OPS or cmd.op in DENSE_OPS:  # the dense commands need no scratch, only the tables
                self.moe_scratch[cmd.index] = {n: work.take(b) for n, b in moe_scratch_bytes(cycle, cmd).items()}
            elif cmd.op != "allreduce":
                m = cycle.geometry.phase(cmd.boundary.phase).rows
                self.scratch[cmd.index] = work.take(4 * m * ((LANES // BLOCK) * (NOUT[cmd.op] + 1) + 4 + NOUT[cmd.op]))
                self.sync[cmd.index] = work.take(8)
            else:
                self.slots[cmd.index] = work.take(8 * cycle.ranks * MAX_PIECES)
        self.epoch_off = work.take(8)
        # the MoE kernels' decode tables (ml_dtypes' E4M3 and E2M1 values), uploaded once per rank
        self.tables_off = work.take(decode_tables().nbytes) if self.moe_scratch else None
        staging = Arena()  # expected outputs of `copy` commands (Session.set_expected)
        self.staging = {bid: staging.take(cycle.buffers[bid].nbytes) for idx, v in variants.items()
                        if isinstance(v, Variant) and v.node is Node.COPY
                        for bid in cycle.commands[idx].outputs.values()}
        expanded = Arena()  # bf16 weights of `moe-expanded` expert commands, decoded on the device from the params
        self.expanded = {idx: {n: expanded.take(b) for n, b in expanded_bytes(cycle, cycle.commands[idx]).items()}
                         for idx, v in variants.items() if isinstance(v, Variant) and v.expanded}
        self._sizes = (outs.size, state.size, work.size, staging.size, expanded.size)
        self.out_size, self.work_size = outs.size, work.size
        self.base: dict[int, tuple[int, ...]] = {}
        self.owned: list[int] = []  # allocations of this process
        self.opened: list[int] = []  # peers' arenas mapped through IPC handles
        self.peer_tables: dict = {}

    def allocate(self, rank: int) -> None:
        ptrs = []
        for size in self._sizes:
            ptrs.append(int(self.cu.cuMemAlloc(max(size, ALIGN))))
            self.owned.append(ptrs[-1])
        self.cu.cuMemsetD8(ptrs[2], 0, max(self.work_size, ALIGN))
        if self.tables_off is not None:
            t = decode_tables()
            self.cu.cuMemcpyHtoD(ptrs[2] + self.tables_off, t.ctypes.data, t.nbytes)
        self.base[rank] = tuple(ptrs)

    # --- addresses --------------------------------------------------------------------------
    def addr(self, rank: int, bid: int) -> int:
        o, s = self.base[rank][:2]
        return (o if self.kinds[bid] == "output" else s) + self.offsets[bid]

    def work(self, rank: int, off: int) -> int:
        return self.base[rank][2] + off

    def staged(self, rank: int, bid: int) -> int:
        return self.base[rank][3] + self.staging[bid]

    def expanded_addr(self, rank: int, idx: int, name: str) -> int:
        return self.base[rank][4] + self.expanded[idx][name]

    def outputs(self, rank: int) -> int:
        return self.base[rank][0]

    def peer_table(self, cmd, tensor: str) -> int:
        """A device array of every rank's address of one tensor of `cmd` (made once per command)."""
        key = (cmd.index, tensor)
        if key not in self.peer_tables:
            bid = {**cmd.inputs, **cmd.outputs}[tensor]
            table = np.array([self.addr(q, bid) for q in range(self.cycle.ranks)], dtype=np.uint64)
            ptr = int(self.cu.cuMemAlloc(table.nbytes))
            self.peer_tables[key] = ptr
            self.cu.cuMemcpyHtoD(ptr, table.ctypes.data, table.nbytes)
        return self.peer_tables[key]

    # --- one process per rank: IPC handles --------------------------------------------------
    def export_handles(self, rank: int) -> list[bytes]:
        """IPC handles of this rank's outputs, state and work arenas (64 bytes each)."""
        return [C.string_at(self.cu.cuIpcGetMemHandle(p).getPtr(), 64) for p in self.base[rank][:3]]

    def attach_peers(self, handles: dict[int, list[bytes]]) -> None:
        """Map every peer's arenas into this process (peer access enabled as needed)."""
        cu = self.cu.bindings
        for r, hs in handles.items():
            if r in self.base:
                continue
            ptrs = []
            for raw in hs:
                h = cu.CUipcMemHandle()
                C.memmove(h.getPtr(), raw, 64)
                ptrs.append(int(self.cu.cuIpcOpenMemHandle(h, cu.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)))
                self.opened.append(ptrs[-1])
            self.base[r] = (*ptrs, 0, 0)

    def free(self) -> None:
        """Release every mapping and allocation made so far (each once)."""
        while self.opened:
            self.cu.cuIpcCloseMemHandle(self.opened.pop())
        while self.owned:
            self.cu.cuMemFree(self.owned.pop())
        while self.peer_tables:
            self.cu.cuMemFree(self.peer_tables.popitem()[1])
