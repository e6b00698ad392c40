"""A cycle's ranks on a GPU: buffers allocated once, one CUDA graph built node by node.

Emulated ranks (rank=None): all ranks' buffers live on one device; each rank is its own chain of
kernel nodes, joined only at collectives (a rank's all-reduce node depends on every rank's previous
node, since it reads every rank's partial sums). One process per rank (rank=r): this session holds
rank r's buffers, maps its peers' through IPC handles, and its all-reduce kernels meet the peers'
through 64-bit epoch-tagged arrival slots in device memory (drivers/cuda/processes.py runs them).
Consecutive kernels of a chain are joined by programmatic edges where the device has them (sm_90+):
a kernel starts while its predecessor finishes and requests its weights before it waits.
Event-record nodes at the head and tail of each rank's chain give per-rank device times. Epochs
only poison the outputs (memset, untimed), launch the graph and read.
"""

from __future__ import annotations

import ctypes as C
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...commands.program import Command, Cycle
from ...contracts.allreduce import RingContract
from ...contracts.numerics import BF16, LANES
from ...errors import UsageError
from ..base import Session
from . import args as A
from .nvrtc import EXACT_FLAGS, FMA_FLAGS, compile_cubin, cuda_include_dirs

SOURCE = (Path(__file__).with_name("kernels.cu")).read_text()
BLOCK = 128
ALIGN = 256
NOUT = {"mhc_pre": 24, "mhc_post_pre": 24, "mhc_post_head": 4}


def outputs_per_block(op: str, rows: int) -> int:
    """Projection outputs per block (grid y = NOUT / OPG). Fewer outputs per block spread the weight
    stream over more blocks, more of them reuse each stream value: on the H200 (tools/bench_replay.py
    under DECODER_SHELL_CUDA_OPG = 2..12, docs/BENCHMARKS.md) 4 was fastest at M=2 and 12 at M=8.
    DECODER_SHELL_CUDA_OPG (a divisor of 24) overrides it for tuning runs."""
    if op == "mhc_post_head":
        return 4
    env = int(os.environ.get("DECODER_SHELL_CUDA_OPG", "0") or 0)
    if env and NOUT[op] % env == 0:
        return env
    return 4 if rows <= 2 else (8 if rows < 8 else 12)
OPNAME = {"mhc_pre": "OP_PRE", "mhc_post_pre": "OP_POST_PRE", "mhc_post_head": "OP_POST_HEAD"}

VARIANTS = {
    "baseline": "the replay's own kernels: one-shot all-reduce node + mHC node (one row per block; on sm_90+ its "
                "8-block clusters finish pre through distributed shared memory) + Sinkhorn node beside the next all-reduce",
    "grid-barrier": "the mHC kernel without clusters: pre's tree after one grid-wide arrival on a 64-bit counter, "
                    "mixes and post in block 0",
    "sinkhorn-inline": "the baseline mHC kernel computing the Sinkhorn comb itself (no separate node)",
    "delete": "no node at all (deletion-only upper bound; outputs stay poisoned)",
    "copy": "a copy of the command's expected outputs instead of the command (deletion-only bound)",
    "fused-m2": "fixed-width mHC kernel, all 2 rows in one block (phase must have M=2)",
    "fused-m4": "fixed-width mHC kernel, all 4 rows in one block (phase must have M=4)",
    "fused-m8": "fixed-width mHC kernel, all 8 rows in one block (phase must have M=8)",
    "fused-allreduce-mhc": "the preceding all-reduce folded into this mHC kernel (one node per rank and boundary)",
    "cluster": "mHC kernel on 8-block thread-block clusters, one per row, reducing through distributed shared memory (sm_90+, D a multiple of 1024)",
    "cluster-fused": "cluster mHC kernel with the preceding all-reduce folded in (one node per rank and boundary)",
    "fma": "mHC kernel built with FMA contraction (deliberately inexact)",
    "empty": "an empty kernel node in the command's place (the launch floor)",
    "oneshot": "all-reduce: every rank reads all peers in the contract's order (baseline)",
    "ring": "all-reduce as reduce-scatter + all-gather nodes (the ring's structure, same order)",
    "segmented-2": "all-reduce run as 2 narrower collectives (changes bits unless the contract is segmented so)",
    "segmented-4": "all-reduce run as 4 narrower collectives",
}


FUSED_VARIANTS = ("fused-allreduce-mhc", "cluster-fused")
#: Variants that read peers' buffers outside an all-reduce kernel's arrival protocol: emulated ranks only.
EMULATED_ONLY = ("ring", *FUSED_VARIANTS)
MAX_PIECES = 4  # all-reduce launches per collective (segmented-4): one arrival slot set each


@dataclass
class KernelSpec:
    op: str
    rows_per_block: int
    fused: bool
    q: int = 0  # D / LANES on the fast path (D a multiple of LANES), else 0
    cluster: bool = False
    opg: int = 8  # projection outputs per block
    clpre: bool = False  # cluster-pre

    @property
    def entry(self) -> str:
        kind = "cl" if self.cluster else f"r{self.rows_per_block}_o{self.opg}{'_cp' if self.clpre else ''}"
        return f"mhc_{self.op[4:]}_{kind}_q{self.q}{'_fused' if self.fused else ''}"

    @property
    def threads(self) -> int:
        return BLOCK * (2 if self.cluster and NOUT[self.op] > 8 else 1)

    def wrapper(self) -> str:
        if self.cluster:
            return (f'extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__({self.threads}) '
                    f'{self.entry}(const MhcArgs a) {{ mhc_cluster<{NOUT[self.op]}, {OPNAME[self.op]}, '
                    f'{"true" if self.fused else "false"}, {self.q}>(a); }}\n')
        dims = "__cluster_dims__(8, 1, 1) " if self.clpre else ""
        return (f'extern "C" __global__ void {dims}__launch_bounds__(BLOCK) {self.entry}(const MhcArgs a) '
                f'{{ mhc_boundary<{NOUT[self.op]}, {self.opg}, {self.rows_per_block}, {OPNAME[self.op]}, '
                f'{"true" if self.fused else "false"}, {self.q}, {"true" if self.clpre else "false"}>(a); }}\n')


class Arena:
    """One device allocation carved into aligned, fixed-address pieces."""

    def __init__(self):
        self.size = 0

    def take(self, nbytes: int) -> int:
        off = self.size
        self.size += -(-max(nbytes, 1) // ALIGN) * ALIGN
        return off


class CudaSession(Session):
    timing_meaningful = True

    def __init__(self, drv, cycle: Cycle, variants: dict | None, *, rank: int | None = None, pdl: bool = True,
                 build: bool = True):
        """rank=None: every rank emulated here. rank=r: only rank r; call attach_peers() then build()."""
        self.cu, self.cycle = drv.cu, cycle
        self.arch = drv.arch
        self.variants = {int(k): v for k, v in (variants or {}).items()}
        self.rank = rank
        self.local = list(range(cycle.ranks)) if rank is None else [rank]
        self.pdl = pdl and int(self.arch[3:]) >= 90
        self._validate()
        self._freed = False
        self.exec = self.graph = None
        self.stream = self.cu.cuStreamCreate(1)
        # --- fixed buffers: outputs (poisoned every epoch), state (inputs, params), work (scratch, sync,
        # arrival slots, epoch counter)
        outs, state, work = Arena(), Arena(), Arena()
        self.offsets = {}
        for b in cycle.buffers:
            self.offsets[b.id] = (outs if b.kind == "output" else state).take(b.nbytes)
        self.scratch, self.sync, self.slots = {}, {}, {}
        for cmd in cycle.commands:
            if cmd.op != "allreduce":
                m = cycle.geometry.phase(cmd.boundary.phase).rows
                self.scratch[cmd.index] = work.take(4 * m * ((LANES // BLOCK) * (NOUT[cmd.op] + 1) + 4 + NOUT[cmd.op]))
                self.sync[cmd.index] = work.take(8)
            else:
                self.slots[cmd.index] = work.take(8 * cycle.ranks * MAX_PIECES)
        self.epoch_off = work.take(8)
        staging = Arena()  # expected outputs of `copy` commands (Session.set_expected)
        self.staging = {bid: staging.take(cycle.buffers[bid].nbytes) for idx, v in self.variants.items()
                        if v == "copy" for bid in cycle.commands[idx].outputs.values()}
        self.peer_tables: dict = {}
        self.arenas: dict[int, tuple[int, int, int, int]] = {}
        self.opened: list[int] = []  # peers' arenas mapped through IPC handles
        for r in self.local:
            o, st, w, x = (self.cu.cuMemAlloc(max(a.size, ALIGN)) for a in (outs, state, work, staging))
            self.cu.cuMemsetD8(w, 0, max(work.size, ALIGN))
            self.arenas[r] = (int(o), int(st), int(w), int(x))
        self.out_size = outs.size
        self.kinds = {b.id: b.kind for b in cycle.buffers}
        mhc = [c for c in cycle.commands if c.op != "allreduce"]
        self._next_mhc = {a.index: b for a, b in zip(mhc, mhc[1:])}  # whose weights idle blocks prefetch
        if build:
            self.build()

    def build(self):
        """Compile (or load cached) kernels and build the graph; every rank's arena must be known."""
        missing = sorted(set(range(self.cycle.ranks)) - set(self.arenas))
        if missing:
            raise UsageError(f"rank {self.rank}: peers {missing} not attached (attach_peers before build)")
        self._build_modules()
        self._build_graph()

    # --- one process per rank: IPC handles -----------------------------------------------
    def export_handles(self) -> list[bytes]:
        """IPC handles of this rank's outputs, state and work arenas (64 bytes each)."""
        return [C.string_at(self.cu.cuIpcGetMemHandle(p).getPtr(), 64) for p in self.arenas[self.rank][:3]]

    def attach_peers(self, handles: dict[int, list[bytes]]):
        """Map every peer's arenas into this process (peer access enabled as needed)."""
        cu = self.cu._cu
        for r, hs in handles.items():
            if r in self.arenas:
                continue
            ptrs = []
            for raw in hs:
                h = cu.CUipcMemHandle()
                C.memmove(h.getPtr(), raw, 64)
                ptrs.append(int(self.cu.cuIpcOpenMemHandle(h, cu.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)))
            self.opened += ptrs
            self.arenas[r] = (*ptrs, 0)

    # --- addresses --------------------------------------------------------------------------
    def addr(self, rank: int, bid: int) -> int:
        o, s = self.arenas[rank][:2]
        return (o if self.kinds[bid] == "output" else s) + self.offsets[bid]

    def _work(self, rank: int, off: int) -> int:
        return self.arenas[rank][2] + off

    # --- variants ---------------------------------------------------------------------------
    def _validate(self):
        cmds = self.cycle.commands
        if self.cycle.ranks > A.MAXR:
            raise UsageError(f"the cuda driver emulates at most {A.MAXR} ranks on one device (--tp {self.cycle.ranks})")
        for idx, v in self.variants.items():
            if not isinstance(v, str):
                self._validate_user(idx, v)
                continue
            if v not in VARIANTS:
                raise UsageError(f"cuda driver has no implementation {v!r} (see `shell gate --list-candidates`)")
            if self.rank is not None and v in EMULATED_ONLY:
                raise UsageError(f"{v!r} reads peers outside the arrival protocol: emulated ranks only "
                                 f"(--placement emulated)")
            if not 0 <= idx < len(cmds):
                raise UsageError(f"no command {idx} in this cycle")
            op = cmds[idx].op
            if op == "allreduce" and v not in ("baseline", "delete", "copy", "empty", "oneshot", "ring", "segmented-2",
                                               "segmented-4"):
                raise UsageError(f"{v!r} is an mHC implementation; command {idx} is an all-reduce")
            if op != "allreduce" and v in ("oneshot", "ring", "segmented-2", "segmented-4"):
                raise UsageError(f"{v!r} is an all-reduce implementation; command {idx} is {op}")
            if v.startswith("fused-m"):
                rows = self.cycle.geometry.phase(cmds[idx].boundary.phase).rows
                if rows != int(v[7:]):
                    raise UsageError(f"{v} needs M={v[7:]}; {cmds[idx].boundary.name} has M={rows}")
            if v in FUSED_VARIANTS and (idx == 0 or cmds[idx - 1].op != "allreduce"
                                        or self.variants.get(idx - 1) not in (None, "baseline", "oneshot")):
                raise UsageError(f"{v} needs a plain all-reduce right before {cmds[idx].boundary.name}")
            if v in ("cluster", "cluster-fused"):
                d = self.cycle.geometry.hidden
                if d % LANES or d // LANES > 8:
                    raise UsageError(f"{v} needs a hidden size that is a multiple of {LANES} (at most {8 * LANES}); D={d}")
                if int(self.arch[3:]) < 90:
                    raise UsageError(f"{v} needs thread-block clusters (sm_90 or newer); this device is {self.arch}")

    def _validate_user(self, idx: int, cand) -> None:
        """A user kernel (replay.candidates.KernelCandidate): CUDA C source, cubin, fatbin or PTX."""
        if not 0 <= idx < len(self.cycle.commands):
            raise UsageError(f"no command {idx} in this cycle")
        ok = {"source": ("cuda",), "binary": ("cubin", "fatbin", "ptx")}
        if getattr(cand, "language", None) not in ok.get(getattr(cand, "kind", None), ()):
            raise UsageError(f"{cand}: the cuda driver runs CUDA C sources and cubin/fatbin/PTX binaries, "
                             f"not {getattr(cand, 'kind', '?')} {getattr(cand, 'language', '?')}")

    def _spec(self, cmd: Command) -> KernelSpec:
        v = self.variants.get(cmd.index, "baseline")
        rows = self.cycle.geometry.phase(cmd.boundary.phase).rows
        rpb = min(int(v[7:]) if v.startswith("fused-m") else 1, rows)
        d = self.cycle.geometry.hidden
        if v in ("cluster", "cluster-fused"):
            return KernelSpec(cmd.op, 1, v == "cluster-fused", d // LANES, cluster=True)
        q = d // LANES if d % LANES == 0 and d // LANES <= 8 and rpb * 4 * (d // LANES) <= 64 else 0
        opg = outputs_per_block(cmd.op, rows)
        # clusters finish pre from output group 0 alone, which then has to hold all HC pre outputs
        return KernelSpec(cmd.op, rpb, v == "fused-allreduce-mhc", q, opg=opg,
                          clpre=v == "baseline" and int(self.arch[3:]) >= 90 and opg >= 4)

    # --- modules ----------------------------------------------------------------------------
    def _build_modules(self):
        specs = {}
        fma = set()
        for cmd in self.cycle.commands:
            if cmd.op != "allreduce" and isinstance(self.variants.get(cmd.index, ""), str) \
                    and self.variants.get(cmd.index) not in ("delete", "empty", "copy"):
                sp = self._spec(cmd)
                specs[sp.entry] = sp
                if self.variants.get(cmd.index) == "fma":
                    fma.add(sp.entry)
        src = SOURCE + "".join(sp.wrapper() for sp in specs.values())
        self.funcs = {}
        self.modules = []
        for flags, names in ((EXACT_FLAGS, list(specs) + ["allreduce_kernel", "empty_kernel", "copy_kernel", "epoch_kernel", "sinkhorn_kernel"]),
                             (FMA_FLAGS, sorted(fma))):
            if not names:
                continue
            mod = self.cu.cuModuleLoadData(compile_cubin(src, self.arch, flags))
            self.modules.append(mod)
            for n in names:
                key = n if flags is EXACT_FLAGS else n + ":fma"
                self.funcs[key] = self.cu.cuModuleGetFunction(mod, n.encode())
        for cand in {id(v): v for v in self.variants.values() if not isinstance(v, str)}.values():
            if cand.kind == "source":
                image = compile_cubin(cand.code.decode(), self.arch, (*cand.options, *cuda_include_dirs()),
                                      name=f"{cand.name}.cu")
            else:
                image = cand.code + (b"\0" if cand.language == "ptx" else b"")
            mod = self.cu.cuModuleLoadData(image)
            self.modules.append(mod)
            self.funcs[self._user_key(cand)] = self.cu.cuModuleGetFunction(mod, cand.entry.encode())

    @staticmethod
    def _user_key(cand) -> str:
        return f"user:{cand.digest}:{cand.entry}:{' '.join(cand.options)}"

    # --- launches ---------------------------------------------------------------------------
    def _ar_launch(self, cmd: Command, rank: int, mode: int, contract: RingContract, lo: int, hi: int,
                   piece: int = 0) -> A.Launch:
        R = self.cycle.ranks
        bx, bo = cmd.inputs["x"], cmd.outputs["out"]
        buf = self.cycle.buffers[bx]
        n = int(np.prod(buf.shape))
        a = A.ArArgs()
        for q in range(R):
            a.inp[q] = self.addr(q, bx)
            a.out[q] = self.addr(q, bo)
        a.ring = A.ring(contract, n, R, buf.dtype == BF16)
        a.rank, a.lo, a.hi, a.mode = rank, lo, hi, mode
        if self.rank is not None:  # one process per rank: arrival slots (see arrive_and_wait)
            off = self.slots[cmd.index] + 8 * R * piece
            for q in range(R):
                a.flag_out[q] = self._work(q, off + 8 * rank)
            a.flag_in = self._work(rank, off)
            a.epoch = self._work(rank, self.epoch_off)
        threads = 256
        blocks = max(1, min(1024, -(-(hi - lo) // threads)))
        return A.Launch(self.funcs["allreduce_kernel"], (blocks, 1, 1), (threads, 1, 1), a, pdl=True)

    def _mhc_launch(self, cmd: Command, rank: int, prev_ar: Command | None) -> A.Launch:
        g = self.cycle.geometry
        sp = self._spec(cmd)
        rows = g.phase(cmd.boundary.phase).rows
        a = A.MhcArgs()
        ins, outs = cmd.inputs, cmd.outputs
        a.x = self.addr(rank, ins["x"])
        xbuf = self.cycle.buffers[ins["x"]]
        a.x_is_bf16 = int(xbuf.dtype == BF16)
        if sp.fused:
            px = prev_ar.inputs["x"]
            for q in range(self.cycle.ranks):
                a.peers[q] = self.addr(q, px)
            a.ar_out = self.addr(rank, prev_ar.outputs["out"])
            a.ring = A.ring(self.cycle.contract, int(np.prod(xbuf.shape)), self.cycle.ranks, xbuf.dtype == BF16)
        for name in ("residual", "post", "comb"):
            if name in ins:
                setattr(a, {"post": "post_in", "comb": "comb_in"}.get(name, name), self.addr(rank, ins[name]))
        a.fn, a.base, a.scale = (self.addr(rank, ins[k]) for k in ("fn", "base", "scale"))
        a.streams, a.y = self.addr(rank, outs["streams"]), self.addr(rank, outs["y"])
        if "next_post" in outs:
            a.post_out, a.comb_out = self.addr(rank, outs["next_post"]), self.addr(rank, outs["next_comb"])
        a.scratch = self._work(rank, self.scratch[cmd.index])
        a.sync = self._work(rank, self.sync[cmd.index])
        a.M, a.D = rows, g.hidden
        a.sinkhorn_iters = g.mhc.sinkhorn_iters
        a.hc_eps, a.norm_eps = g.mhc.hc_eps, g.mhc.norm_eps
        a.split_sinkhorn = (0 if "next_comb" not in outs or self.variants.get(cmd.index) == "sinkhorn-inline"
                            else 2 if sp.clpre else 1)
        nxt = self._next_mhc.get(cmd.index)
        if nxt is not None and os.environ.get("DECODER_SHELL_CUDA_PREFETCH", "1") != "0":
            a.next_fn = self.addr(rank, nxt.inputs["fn"])
            a.next_fn_bytes = self.cycle.buffers[nxt.inputs["fn"]].nbytes
        key = sp.entry + (":fma" if self.variants.get(cmd.index) == "fma" else "")
        if sp.cluster:
            return A.Launch(self.funcs[key], (LANES // BLOCK, rows, 1), (sp.threads, 1, 1), a, pdl=True)
        grid = (LANES // BLOCK, NOUT[cmd.op] // sp.opg, -(-rows // sp.rows_per_block))
        return A.Launch(self.funcs[key], grid, (BLOCK, 1, 1), a, pdl=True)

    def _user_launch(self, cmd: Command, rank: int, cand) -> A.Launch:
        """Bind a user kernel's arguments: tensors of this rank (or every rank's, `peers:`), scalars, literals."""
        g = self.cycle.geometry
        scalars = {"rows": g.phase(cmd.boundary.phase).rows, "hidden": g.hidden, "hc": g.hc,
                   "ranks": self.cycle.ranks, "rank": rank}
        literal = {"i32": C.c_int32, "u32": C.c_uint32, "i64": C.c_int64, "u64": C.c_uint64, "f32": C.c_float}
        values = []
        for arg in cand.args:
            if arg.kind in ("in", "param"):
                values.append(C.c_uint64(self.addr(rank, cmd.inputs[arg.name])))
            elif arg.kind == "out":
                values.append(C.c_uint64(self.addr(rank, cmd.outputs[arg.name])))
            elif arg.kind == "peers":
                values.append(C.c_uint64(self._peer_table(cmd, arg.name)))
            elif arg.kind == "scalar":
                values.append(C.c_int32(scalars[arg.name]))
            else:
                values.append(literal[arg.kind](arg.value))
        return A.Launch(self.funcs[self._user_key(cand)], cand.grid, cand.block, *values, shared=cand.shared_bytes)

    def _peer_table(self, cmd: Command, tensor: str) -> int:
        """A device array of every rank's address of one tensor of `cmd` (made once per command)."""
        key = (cmd.index, tensor)
        if key not in self.peer_tables:
            bid = {**cmd.inputs, **cmd.outputs}[tensor]
            table = np.array([self.addr(q, bid) for q in range(self.cycle.ranks)], dtype=np.uint64)
            ptr = int(self.cu.cuMemAlloc(table.nbytes))
            self.cu.cuMemcpyHtoD(ptr, table.ctypes.data, table.nbytes)
            self.peer_tables[key] = ptr
        return self.peer_tables[key]

    def _copy_launch(self, cmd: Command, rank: int) -> A.Launch:
        a = A.CopyArgs()
        outs = list(cmd.outputs.values())
        for c, bid in enumerate(outs):
            a.dst[c] = self.addr(rank, bid)
            a.src[c] = self.arenas[rank][3] + self.staging[bid]
            a.nbytes[c] = self.cycle.buffers[bid].nbytes
        a.count = len(outs)
        return A.Launch(self.funcs["copy_kernel"], (64, 1, 1), (256, 1, 1), a)

    # --- graph ------------------------------------------------------------------------------
    def _add_kernel(self, launch: A.Launch, deps: list):
        """A kernel node after `deps`; edges between two kernels that wait properly are programmatic."""
        cu = self._cu_mod()
        p = cu.CUDA_KERNEL_NODE_PARAMS()
        p.func = launch.func
        p.gridDimX, p.gridDimY, p.gridDimZ = launch.grid
        p.blockDimX, p.blockDimY, p.blockDimZ = launch.block
        p.sharedMemBytes = launch.shared
        p.kernelParams = launch.params_ptr
        self.launches.append(launch)
        self.launch_commands.append(self._building)  # which command each kernel serves (profile.py)
        early = self.pdl and launch.pdl and all(int(d) in self.pdl_nodes for d in deps)
        if not early:
            node = self.cu.cuGraphAddKernelNode(self.graph, deps, len(deps), p)
        else:
            node = self.cu.cuGraphAddKernelNode(self.graph, [], 0, p)
            edge = cu.CUgraphEdgeData()
            edge.from_port = cu.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
            edge.type = cu.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
            self.cu.cuGraphAddDependencies(self.graph, deps, [node] * len(deps), [edge] * len(deps), len(deps))
        if launch.pdl:
            self.pdl_nodes.add(int(node))
        return node

    def _cu_mod(self):
        return self.cu._cu

    def _collective_deps(self, last: dict, r: int) -> list:
        """Emulated ranks wait for every rank before a collective; a process waits in the kernel."""
        return list(last.values()) if self.rank is None else [last[r]]

    def _build_graph(self):
        cu = self.cu
        self.graph = cu.cuGraphCreate(0)
        self.ev_start = {r: cu.cuEventCreate(0) for r in self.local}
        self.ev_end = {r: cu.cuEventCreate(0) for r in self.local}
        self.eager_start, self.eager_end = cu.cuEventCreate(0), cu.cuEventCreate(0)
        self.launches: list[A.Launch] = []
        self.eager: list[A.Launch] = []
        self.pdl_nodes: set[int] = set()
        self.launch_commands: list[int | None] = []
        self._building = None
        last = {r: cu.cuGraphAddEventRecordNode(self.graph, [], 0, self.ev_start[r]) for r in self.local}
        if self.rank is not None:  # the epoch that tags this cycle's arrivals
            ln = A.Launch(self.funcs["epoch_kernel"], (1, 1, 1), (1, 1, 1),
                          C.c_uint64(self._work(self.rank, self.epoch_off)))
            last[self.rank] = self._add_kernel(ln, [last[self.rank]])
            self.eager.append(ln)
        cmds = self.cycle.commands
        fused_away = {i - 1 for i, v in self.variants.items() if v in FUSED_VARIANTS}
        pending: dict[int, list] = {}  # rank -> its Sinkhorn node, joined by the rank's next mHC node
        for cmd in cmds:
            self._building = cmd.index
            v = self.variants.get(cmd.index, "baseline")
            if v == "delete" or cmd.index in fused_away:
                continue
            if not isinstance(v, str) or v in ("copy", "empty"):
                new = {}
                for r in self.local:
                    if v == "copy":
                        ln = self._copy_launch(cmd, r)
                    elif v == "empty":
                        ln = A.Launch(self.funcs["empty_kernel"], (1, 1, 1), (32, 1, 1), A.Ring())
                    else:
                        ln = self._user_launch(cmd, r, v)
                    deps = self._collective_deps(last, r) if cmd.op == "allreduce" else [last[r], *pending.pop(r, [])]
                    new[r] = self._add_kernel(ln, deps)
                    self.eager.append(ln)
                last = new
                continue
            if cmd.op == "allreduce":
                last = self._graph_allreduce(cmd, v, last)
            else:
                fused = v in FUSED_VARIANTS
                prev = cmds[cmd.index - 1] if fused else None
                new = {}
                for r in self.local:
                    ln = self._mhc_launch(cmd, r, prev)
                    deps = list(last.values()) if fused else [last[r]]
                    new[r] = self._add_kernel(ln, deps + pending.pop(r, []))
                    self.eager.append(ln)
                    if ln.args[0].split_sinkhorn:
                        sk = A.Launch(self.funcs["sinkhorn_kernel"], (1, 1, 1), (BLOCK, 1, 1), ln.args[0], pdl=True)
                        pending[r] = [self._add_kernel(sk, [new[r]])]
                        self.eager.append(sk)
                last = new
        for r in self.local:
            deps = [last[r], *pending.pop(r, [])]
            cu.cuGraphAddEventRecordNode(self.graph, deps, len(deps), self.ev_end[r])
        self.exec = cu.cuGraphInstantiate(self.graph, 0)

    def _graph_allreduce(self, cmd: Command, v: str, last: dict) -> dict:
        n = int(np.prod(self.cycle.buffers[cmd.inputs["x"]].shape))
        contract = self.cycle.contract
        if v == "ring":
            rs = {}
            for r in self.local:
                ln = self._ar_launch(cmd, r, 1, contract, 0, n)
                rs[r] = self._add_kernel(ln, list(last.values()))
                self.eager.append(ln)
            new = {}
            for r in self.local:
                ln = self._ar_launch(cmd, r, 2, contract, 0, n)
                new[r] = self._add_kernel(ln, list(rs.values()))
                self.eager.append(ln)
            return new
        pieces = [(0, n)]
        if v.startswith("segmented-"):
            k = int(v.split("-")[1])
            contract = RingContract(**{**contract.to_json(), "segments": k})
            size = -(-n // k)
            pieces = [(s * size, min(n, (s + 1) * size)) for s in range(k) if s * size < n]
        new = {}
        for r in self.local:
            deps = self._collective_deps(last, r)
            for piece, (lo, hi) in enumerate(pieces):
                ln = self._ar_launch(cmd, r, 0, contract, lo, hi, piece)
                node = self._add_kernel(ln, deps)
                self.eager.append(ln)
                deps = [node]
            new[r] = deps[0]
        return new

    # --- Session interface ------------------------------------------------------------------
    def write(self, rank, buffer_id, value):
        b = self.cycle.buffers[buffer_id]
        a = np.ascontiguousarray(np.asarray(value, dtype=b.dtype).reshape(b.shape))
        self.cu.cuMemcpyHtoD(self.addr(rank, buffer_id), a.ctypes.data, a.nbytes)

    def read(self, rank, buffer_id):
        b = self.cycle.buffers[buffer_id]
        out = np.empty(b.shape, dtype=b.dtype)
        self.cu.cuMemcpyDtoH(out.ctypes.data, self.addr(rank, buffer_id), out.nbytes)
        return out

    def set_expected(self, rank, buffer_id, value):
        """Expected output of a `copy` command (the gate hands these over before timing)."""
        if buffer_id not in self.staging:
            return
        b = self.cycle.buffers[buffer_id]
        a = np.ascontiguousarray(np.asarray(value, dtype=b.dtype).reshape(b.shape))
        self.cu.cuMemcpyHtoD(self.arenas[rank][3] + self.staging[buffer_id], a.ctypes.data, a.nbytes)

    def poison(self):
        for r in self.local:
            self.cu.cuMemsetD8Async(self.arenas[r][0], 0xFF, self.out_size, self.stream)
        self.cu.cuStreamSynchronize(self.stream)

    def run(self, graph=True):
        cu = self.cu
        if graph:
            cu.cuGraphLaunch(self.exec, self.stream)
            cu.cuStreamSynchronize(self.stream)
            return [float(cu.cuEventElapsedTime(self.ev_start[r], self.ev_end[r])) if r in self.ev_start else 0.0
                    for r in range(self.cycle.ranks)]
        cu.cuEventRecord(self.eager_start, self.stream)
        for ln in self.eager:
            cu.cuLaunchKernel(ln.func, *ln.grid, *ln.block, ln.shared, self.stream, ln.params_ptr, 0)
        cu.cuEventRecord(self.eager_end, self.stream)
        cu.cuStreamSynchronize(self.stream)
        t = float(cu.cuEventElapsedTime(self.eager_start, self.eager_end))
        return [t] * self.cycle.ranks

    def profile(self):
        """One epoch timed kernel by kernel, for replay --breakdown (drivers/cuda/profile.py)."""
        from .profile import profile_epoch
        return profile_epoch(self)

    @property
    def node_count(self) -> int:
        return len(self.launches)

    def close(self):
        if self._freed:
            return
        self._freed = True
        cu = self.cu
        cu.cuStreamSynchronize(self.stream)
        if self.exec is not None:
            cu.cuGraphExecDestroy(self.exec)
            cu.cuGraphDestroy(self.graph)
            for ev in [*self.ev_start.values(), *self.ev_end.values(), self.eager_start, self.eager_end]:
                cu.cuEventDestroy(ev)
        for p in self.opened:
            cu.cuIpcCloseMemHandle(p)
        for r in self.local:
            for p in self.arenas[r]:
                cu.cuMemFree(p)
        for p in self.peer_tables.values():
            cu.cuMemFree(p)
        for m in getattr(self, "modules", []):
            cu.cuModuleUnload(m)
        cu.cuStreamDestroy(self.stream)
