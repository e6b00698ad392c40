"""A cycle on one GPU: every rank's buffers allocated once, one CUDA graph built node by node.

Emulated ranks: all ranks' buffers live on the device; each rank is its own chain of kernel nodes,
joined only at collectives (a rank's all-reduce node depends on every rank's previous node, since it
reads every rank's partial sums). Event-record nodes at the head and tail of each rank's chain give
per-rank device times. Epochs only poison the outputs (memset, untimed), launch the graph and read.
"""

from __future__ import annotations

import ctypes as C
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
OPG = {"mhc_pre": 8, "mhc_post_pre": 8, "mhc_post_head": 4}  # outputs per block (grid y = NOUT / OPG)
OPNAME = {"mhc_pre": "OP_PRE", "mhc_post_pre": "OP_POST_PRE", "mhc_post_head": "OP_POST_HEAD"}

VARIANTS = {
    "baseline": "the replay's own kernels: one-shot all-reduce node + mHC node (one row per block)",
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


@dataclass
class KernelSpec:
    op: str
    rows_per_block: int
    fused: bool
    q: int = 0  # D / LANES on the fast path (D a multiple of LANES), else 0
    cluster: bool = False

    @property
    def entry(self) -> str:
        kind = "cl" if self.cluster else f"r{self.rows_per_block}"
        return f"mhc_{self.op[4:]}_{kind}_q{self.q}{'_fused' if self.fused else ''}"

    @property
    def threads(self) -> int:
        return BLOCK * (2 if self.cluster and NOUT[self.op] > 8 else 1)

    def wrapper(self) -> str:
        if self.cluster:
            return (f'extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__({self.threads}) '
                    f'{self.entry}(const MhcArgs a) {{ mhc_cluster<{NOUT[self.op]}, {OPNAME[self.op]}, '
                    f'{"true" if self.fused else "false"}, {self.q}>(a); }}\n')
        return (f'extern "C" __global__ void __launch_bounds__(BLOCK) {self.entry}(const MhcArgs a) '
                f'{{ mhc_boundary<{NOUT[self.op]}, {OPG[self.op]}, {self.rows_per_block}, {OPNAME[self.op]}, '
                f'{"true" if self.fused else "false"}, {self.q}>(a); }}\n')


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

    def __init__(self, drv, cycle: Cycle, variants: dict | None):
        self.cu, self.cycle = drv.cu, cycle
        self.arch = drv.arch
        self.variants = {int(k): v for k, v in (variants or {}).items()}
        self._validate()
        R = cycle.ranks
        self._freed = False
        self.stream = self.cu.cuStreamCreate(1)
        # --- fixed buffers: outputs (poisoned every epoch), state (inputs, params), work (scratch, sync)
        outs, state, work = Arena(), Arena(), Arena()
        self.offsets = {}
        for b in cycle.buffers:
            self.offsets[b.id] = (outs if b.kind == "output" else state).take(b.nbytes)
        self.scratch, self.sync = {}, {}
        for cmd in cycle.commands:
            if cmd.op != "allreduce":
                m = cycle.geometry.phase(cmd.boundary.phase).rows
                self.scratch[cmd.index] = work.take(4 * m * ((LANES // BLOCK) * (NOUT[cmd.op] + 1) + 4 + NOUT[cmd.op]))
                self.sync[cmd.index] = work.take(8)
        staging = Arena()  # expected outputs of `copy` commands (Session.set_expected)
        self.staging = {bid: staging.take(cycle.buffers[bid].nbytes) for idx, v in self.variants.items()
                        if v == "copy" for bid in cycle.commands[idx].outputs.values()}
        self.peer_tables: dict = {}
        self.arenas = []
        for _ in range(R):
            o, s, w, x = (self.cu.cuMemAlloc(max(a.size, ALIGN)) for a in (outs, state, work, staging))
            self.cu.cuMemsetD8(w, 0, max(work.size, ALIGN))
            self.arenas.append((int(o), int(s), int(w), int(x)))
        self.out_size = outs.size
        self.kinds = {b.id: b.kind for b in cycle.buffers}
        self._build_modules()
        self._build_graph()

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
            if v.startswith("cluster"):
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
        if v.startswith("cluster"):
            return KernelSpec(cmd.op, 1, v == "cluster-fused", d // LANES, cluster=True)
        q = d // LANES if d % LANES == 0 and d // LANES <= 8 and rpb * 4 * (d // LANES) <= 64 else 0
        return KernelSpec(cmd.op, rpb, v == "fused-allreduce-mhc", q)

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
        for flags, names in ((EXACT_FLAGS, list(specs) + ["allreduce_kernel", "empty_kernel", "copy_kernel"]),
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
    def _ar_launch(self, cmd: Command, rank: int, mode: int, contract: RingContract, lo: int, hi: int) -> A.Launch:
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
        threads = 256
        blocks = max(1, min(1024, -(-(hi - lo) // threads)))
        return A.Launch(self.funcs["allreduce_kernel"], (blocks, 1, 1), (threads, 1, 1), a)

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
        key = sp.entry + (":fma" if self.variants.get(cmd.index) == "fma" else "")
        if sp.cluster:
            return A.Launch(self.funcs[key], (LANES // BLOCK, rows, 1), (sp.threads, 1, 1), a)
        grid = (LANES // BLOCK, NOUT[cmd.op] // OPG[cmd.op], -(-rows // sp.rows_per_block))
        return A.Launch(self.funcs[key], grid, (BLOCK, 1, 1), a)

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
        p = self._cu_mod().CUDA_KERNEL_NODE_PARAMS()
        p.func = launch.func
        p.gridDimX, p.gridDimY, p.gridDimZ = launch.grid
        p.blockDimX, p.blockDimY, p.blockDimZ = launch.block
        p.sharedMemBytes = launch.shared
        p.kernelParams = launch.params_ptr
        node = self.cu.cuGraphAddKernelNode(self.graph, deps, len(deps), p)
        self.launches.append(launch)
        return node

    def _cu_mod(self):
        return self.cu._cu

    def _build_graph(self):
        R = self.cycle.ranks
        cu = self.cu
        self.graph = cu.cuGraphCreate(0)
        self.ev_start = [cu.cuEventCreate(0) for _ in range(R)]
        self.ev_end = [cu.cuEventCreate(0) for _ in range(R)]
        self.eager_start, self.eager_end = cu.cuEventCreate(0), cu.cuEventCreate(0)
        self.launches: list[A.Launch] = []
        self.eager: list[A.Launch] = []
        last = [cu.cuGraphAddEventRecordNode(self.graph, [], 0, self.ev_start[r]) for r in range(R)]
        cmds = self.cycle.commands
        fused_away = {i - 1 for i, v in self.variants.items() if v in FUSED_VARIANTS}
        for cmd in cmds:
            v = self.variants.get(cmd.index, "baseline")
            if v == "delete" or cmd.index in fused_away:
                continue
            if not isinstance(v, str) or v == "copy":
                new = []
                for r in range(R):
                    ln = self._copy_launch(cmd, r) if v == "copy" else self._user_launch(cmd, r, v)
                    new.append(self._add_kernel(ln, list(last) if cmd.op == "allreduce" else [last[r]]))
                    self.eager.append(ln)
                last = new
                continue
            if v == "empty":
                new = []
                for r in range(R):
                    ln = A.Launch(self.funcs["empty_kernel"], (1, 1, 1), (32, 1, 1), A.Ring())
                    new.append(self._add_kernel(ln, list(last) if cmd.op == "allreduce" else [last[r]]))
                    self.eager.append(ln)
                last = new
                continue
            if cmd.op == "allreduce":
                last = self._graph_allreduce(cmd, v, last)
            else:
                fused = v in FUSED_VARIANTS
                prev = cmds[cmd.index - 1] if fused else None
                new = []
                for r in range(R):
                    ln = self._mhc_launch(cmd, r, prev)
                    deps = list(last) if fused else [last[r]]
                    new.append(self._add_kernel(ln, deps))
                    self.eager.append(ln)
                last = new
        for r in range(R):
            cu.cuGraphAddEventRecordNode(self.graph, [last[r]], 1, self.ev_end[r])
        self.exec = cu.cuGraphInstantiate(self.graph, 0)

    def _graph_allreduce(self, cmd: Command, v: str, last: list) -> list:
        R = self.cycle.ranks
        n = int(np.prod(self.cycle.buffers[cmd.inputs["x"]].shape))
        contract = self.cycle.contract
        if v == "ring":
            rs = []
            for r in range(R):
                ln = self._ar_launch(cmd, r, 1, contract, 0, n)
                rs.append(self._add_kernel(ln, list(last)))
                self.eager.append(ln)
            new = []
            for r in range(R):
                ln = self._ar_launch(cmd, r, 2, contract, 0, n)
                new.append(self._add_kernel(ln, list(rs)))
                self.eager.append(ln)
            return new
        pieces = [(0, n)]
        if v.startswith("segmented-"):
            k = int(v.split("-")[1])
            contract = RingContract(**{**contract.to_json(), "segments": k})
            size = -(-n // k)
            pieces = [(s * size, min(n, (s + 1) * size)) for s in range(k) if s * size < n]
        new = []
        for r in range(R):
            deps = list(last)
            for lo, hi in pieces:
                ln = self._ar_launch(cmd, r, 0, contract, lo, hi)
                node = self._add_kernel(ln, deps)
                self.eager.append(ln)
                deps = [node]
            new.append(deps[0])
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
        for o, *_ in self.arenas:
            self.cu.cuMemsetD8Async(o, 0xFF, self.out_size, self.stream)
        self.cu.cuStreamSynchronize(self.stream)

    def run(self, graph=True):
        cu = self.cu
        if graph:
            cu.cuGraphLaunch(self.exec, self.stream)
            cu.cuStreamSynchronize(self.stream)
            return [float(cu.cuEventElapsedTime(self.ev_start[r], self.ev_end[r])) for r in range(self.cycle.ranks)]
        cu.cuEventRecord(self.eager_start, self.stream)
        for ln in self.eager:
            cu.cuLaunchKernel(ln.func, *ln.grid, *ln.block, ln.shared, self.stream, ln.params_ptr, 0)
        cu.cuEventRecord(self.eager_end, self.stream)
        cu.cuStreamSynchronize(self.stream)
        t = float(cu.cuEventElapsedTime(self.eager_start, self.eager_end))
        return [t] * self.cycle.ranks

    @property
    def node_count(self) -> int:
        return len(self.launches)

    def close(self):
        if self._freed:
            return
        self._freed = True
        cu = self.cu
        cu.cuStreamSynchronize(self.stream)
        cu.cuGraphExecDestroy(self.exec)
        cu.cuGraphDestroy(self.graph)
        for ev in [*self.ev_start, *self.ev_end, self.eager_start, self.eager_end]:
            cu.cuEventDestroy(ev)
        for arena in self.arenas:
            for p in arena:
                cu.cuMemFree(p)
        for p in self.peer_tables.values():
            cu.cuMemFree(p)
        for m in self.modules:
            cu.cuModuleUnload(m)
        cu.cuStreamDestroy(self.stream)
