"""The cluster cycle: the whole cycle as one resident kernel of 16-block clusters (cluster_cycle.cu).

One cluster per (emulated rank, row group) holds that chain for the whole launch: its blocks keep
their lanes' stream values in shared memory from one boundary to the next, meet each other only
through asynchronous stores into each other's shared memory (st.async on an mbarrier), and every cluster meets the others only
at the all-reduces' joins (flag-and-data words where a rank is one cluster, else 64-bit counters; both
only grow). `--cycle auto` takes it where it was measured faster than the graph. The step table is the
persistent cycle's (steps.py); buffers, poisoning and every check are the graph session's.

What it needs, refused in one line otherwise: thread-block clusters of 16 (sm_90, non-portable
size), a hidden size of 1024, 2048 or 4096, every step an mHC boundary whose residual, post and comb
are the previous boundary's outputs or injected inputs (every geometry the synth presets make
without MoE or fused norm), at most 8 rows a cluster, and a grid the device holds at once
(cuOccupancyMaxActiveClusters); the kernel is launched only when every cluster fits.
"""

from __future__ import annotations

import ctypes as C
import os
from pathlib import Path

import numpy as np

from ...contracts.allreduce import rank_order
from ...errors import UsageError
from . import steps as S
from .kernels import SOURCE, sinkhorn_flags
from .nvrtc import EXACT_FLAGS, FMA_FLAGS, compile_cubin, tuning_define
from .persistent import PERSISTENT_SOURCE, WATCHDOG_MS, PersistentSession

#: The kernel's source, one job a file, joined in this order (each builds on those before it; the kernel,
#: cluster_cycle.cu, last).
CLUSTER_SOURCES = ("cluster_sync.cu", "cluster_fold.cu", "cluster_join.cu", "cluster_weights.cu", "cluster_dots.cu",
                   "cluster_exchange.cu", "cluster_stream.cu", "cluster_cycle.cu")
CLUSTER_SOURCE = "".join(Path(__file__).with_name(f).read_text() for f in CLUSTER_SOURCES)
CL_SIZE = 16
#: Threads a block: 8 or 16 warps over the block's 64 lanes (16: half the dot-product chains a warp and
#: twice the threads for the stream values and the fold). DECODER_SHELL_CUDA_CLUSTER_THREADS picks one.
THREAD_BUILDS, THREADS = (256, 512), 512
#: Hidden sizes the kernel is built for (Q = D / 1024 lane steps of 4 streams each, in registers).
HIDDEN = (1024, 2048, 4096)
RPC_BUILDS = (1, 2, 4, 8)


#: The join words' sequence numbers stay below this: a bf16 word carries 16 bits of its number (cluster_join.cu,
#: Word), so the words are zeroed and the numbers start again from 1 before one would reach it.
LL_SEQ_END = 2 ** 16
#: trace slots past the end stamp: CL_ENTRY_STAMP's entry and prologue pieces (cluster_cycle.cu CL_PRO_SLOTS)
PRO_SLOTS = 5


class CArgs(C.Structure):
    _fields_ = [("steps", S.A.u64), ("nsteps", C.c_int), ("ranks", C.c_int), ("join", S.A.u64), ("err", S.A.u64),
                ("timeout_ns", S.A.u64), ("trace", S.A.u64), ("detail", S.A.u64), ("tag", S.A.u64),
                ("rank0", C.c_int), ("nlocal", C.c_int), ("groups", C.c_int), ("mode", C.c_int),
                ("skip_step", C.c_int), ("pad_", C.c_int), ("tmaps", S.A.u64), ("order", S.A.u64),
                ("order_off", S.A.u64), ("ll", S.A.u64),
                ("ll_stride", C.c_longlong), ("ll_seq0", C.c_uint), ("pad3_", C.c_int)]


def weight_buffers(rpc: int) -> int:
    """Steps' weights a block keeps in shared memory: two where the build has at most CL_WBUF2_RPC (2) rows
    (cluster_weights.cu's cl_wbufs: more rows leave no room in shared memory), else one; the tuning defines
    (DECODER_SHELL_CUDA_DEFINES: CL_WBUF2=0, CL_WBUF2_RPC=N) are read here as the compiler reads them."""
    return 2 if int(tuning_define("CL_WBUF2", "1") or 0) and rpc <= int(tuning_define("CL_WBUF2_RPC", "2")) else 1


def weight_slots(q: int, rpc: int) -> int:
    """Box slots (box_rows(q) rows x 64 lanes of fp32 each) a block keeps a step's weights in: cluster_weights.cu's
    cl_wslots. A step's weights are 24 x 4q rows, i.e. `boxes` boxes (2 at q = 4); two buffers hold twice that,
    one buffer that plus a spare slot where the build has at most CL_WSPARE rows (4), so that the next step's first box is copied while
    this step's dot products still read its boxes. The tuning defines are read as the compiler reads them."""
    boxes = -(-24 * 4 * q // box_rows(q))
    if weight_buffers(rpc) == 2:
        return 2 * boxes
    return boxes + (1 if rpc <= int(tuning_define("CL_WSPARE", "4") or 0) else 0)


def dyn_smem_bytes(q: int, rpc: int = max(RPC_BUILDS)) -> int:
    """The launch's dynamic shared memory a block: its weights' box slots (weight_slots: a step's 24 outputs x 4q
    rows x 64 lanes, twice where weight_buffers says two, else with a spare box), then every block's partials of
    two steps (recv: 2 x 16 blocks x rows x 25 chains, padded to 16-byte pieces), sized for the build's own rows
    where it keeps two buffers and for the largest build otherwise (every byte is needed: 227 KiB a block in all).
    The kernel asserts at build time that this holds what it addresses."""
    rows = rpc if weight_buffers(rpc) == 2 else max(RPC_BUILDS)
    return 4 * (weight_slots(q, rpc) * box_rows(q) * (1024 // CL_SIZE) + 2 * CL_SIZE * (-(-rows * 25 // 4) * 4))


def box_rows(q: int) -> int:
    """Rows of one tensor-map box of a step's weights (a box dimension is at most 256): the kernel's
    compile-time cl_box_rows, asserted equal where the kernel is built."""
    return min(24 * 4 * q, 192)


def source(q: int, rpc: int, threads: int = THREADS, ranks: int = 4) -> tuple[str, str]:
    """The kernel for hidden size 1024q, rpc rows a cluster, `threads` a block and a cycle of `ranks`
    ranks (the all-reduce fold is unrolled over exactly the ranks it reads: its loads are issued
    together, and no code is spent on the ranks a cycle does not have)."""
    entry = f"cluster_q{q}_r{rpc}_t{threads}_n{ranks}"
    wrapper = (f'static_assert(cl_dyn_smem<{q}, {rpc}>() <= {dyn_smem_bytes(q, rpc)}, "dynamic shared memory");\n'
               f'static_assert(cl_box_rows<{q}>() == {box_rows(q)}, "the host\'s tensor-map box");\n'
               f'extern "C" __global__ void __launch_bounds__({threads}, 1) {entry}(const CArgs p) '
               f'{{ cluster_cycle<{q}, {rpc}, {threads}, {ranks}>(p); }}\n')
    # the Sinkhorn loop unrolled, the largest build's fold over more than 4 ranks spills at 512 threads
    # (128 registers): that build keeps it rolled (sinkhorn.cu SINKHORN_UNROLL)
    rolled = "#define SINKHORN_UNROLL 1\n" if rpc == max(RPC_BUILDS) and ranks > 4 and threads > 256 else ""
    return rolled + SOURCE + PERSISTENT_SOURCE + CLUSTER_SOURCE + wrapper, entry


def block_threads() -> int:
    """Threads a block: DECODER_SHELL_CUDA_CLUSTER_THREADS (tuning runs) or THREADS; UsageError (one
    line) for a count the kernel is not built for."""
    env = os.environ.get("DECODER_SHELL_CUDA_CLUSTER_THREADS", "").strip() or str(THREADS)
    if not env.isdigit() or int(env) not in THREAD_BUILDS:
        raise UsageError(f"DECODER_SHELL_CUDA_CLUSTER_THREADS={env}: the cluster cycle is built for "
                         f"{' or '.join(map(str, THREAD_BUILDS))} threads a block")
    return int(env)


def check_cycle(cycle, plan) -> None:
    """UsageError (one line) for a cycle the cluster kernel is not built for."""
    g = cycle.geometry
    if g.hidden not in HIDDEN:
        raise UsageError(f"persistent-cluster cycle: built for hidden sizes {HIDDEN}, this cycle has {g.hidden} "
                         "(use --cycle graph or persistent)")
    for k, st in enumerate(plan):
        c = cycle.commands[st.cmd]
        if st.kind != "mhc":
            raise UsageError(f"persistent-cluster cycle: {c.boundary.name} is an all-reduce no boundary folds in")
        if c.op == "mhc_pre":
            continue
        if st.prev == k - 1 and k > 0:
            prev = cycle.commands[plan[k - 1].cmd]
            if prev.outputs.get("streams") == c.inputs.get("residual"):
                continue
        elif st.prev < 0 and all(cycle.buffers[c.inputs[n]].kind != "output" for n in ("residual", "post", "comb")):
            continue
        raise UsageError(f"persistent-cluster cycle: {c.boundary.name} reads outputs of a boundary other than the "
                         "one before it (use --cycle persistent)")


#: `--cycle auto` takes the cluster cycle where it was measured faster than the graph path (H200,
#: dsv4-flash, docs/BENCHMARKS.md tenth session, lanes-fast Sinkhorn: TP4 M=1/2/4/8 1.34-1.39x; with several
#: row groups a rank, TP1 M=1/2/8 1.03-1.04x and M=4 even, TP2 M=2 1.02x and M=8 1.26x): every cycle the
#: kernel is built for with at most this many rows a step (the largest build).
AUTO_MAX_ROWS = 8
#: The commands the kernel runs (everything else, MoE and dense sub-blocks, is graph nodes only).
KERNEL_OPS = ("allreduce", "mhc_pre", "mhc_post_pre", "mhc_post_head")


def auto_fits(sm: int, placement: str, cycle) -> bool:
    """What `--cycle auto` can tell before a session exists: clusters on the device (compute capability
    `sm`, 90 on an H200), every rank on it (`placement` as resolved for the cycle), a cycle the kernel is
    built for (no MoE, no fused norm) with at most AUTO_MAX_ROWS rows a step."""
    if sm < 90 or placement != "emulated" or cycle.geometry.fused_norm:
        return False
    if any(c.op not in KERNEL_OPS for c in cycle.commands):
        return False
    try:
        plan = S.plan(cycle)
        check_cycle(cycle, plan)
    except UsageError:
        return False
    return max(cycle.geometry.phase(cycle.commands[st.cmd].boundary.phase).rows for st in plan) <= AUTO_MAX_ROWS


#: Rows a step up to which a rank keeps one row group (one cluster) even where the device holds more: the rank's
#: y and its all-reduce then join inside the cluster (flag-and-data words) instead of on the grid's counter.
#: H200, thirteenth session (docs/BENCHMARKS.md): TP1 M=2 0.504 ms against 0.530-0.538 with two groups, TP2 M=2
#: 0.519 against 0.549-0.555; from four rows the groups' dot products side by side win at TP1 (M=4/8 0.551 /
#: 0.608-0.636 against 0.608 / 0.883 in one group).
ONE_GROUP_ROWS = 2


def row_groups(rows: int, ranks: int, most: int, env: int = 0) -> int:
    """Row groups (clusters) a rank for a cycle of at most `rows` rows a step on a device that holds `most`
    clusters at once: `env` (DECODER_SHELL_CUDA_CLUSTER_GROUPS) where set, one up to ONE_GROUP_ROWS rows, else
    as many as the device holds beside the other ranks' (at most one a row)."""
    if env:
        return env
    if rows <= ONE_GROUP_ROWS:
        return 1
    return max(1, min(rows, most // ranks))


class ClusterSession(PersistentSession):
    """The graph session's buffers, with one cluster-launched kernel instead of the graph."""

    DETAIL_SLOTS = 16  # CL_DETAIL in cluster_sync.cu

    def _build_persistent(self, drv, fma, blocks, watchdog_ms, skip_step):
        cu, cycle = self.cu, self.cycle
        if self.rank is not None:
            raise UsageError("persistent-cluster cycle: emulated ranks only (--placement emulated)")
        if drv.sm < 90:
            raise UsageError(f"persistent-cluster cycle: needs thread-block clusters (sm_90+); {drv.gpu} is {drv.arch}")
        self.rank0, self.nlocal = 0, cycle.ranks
        self.skip_step = skip_step
        self.watchdog_ms = float(watchdog_ms or os.environ.get("DECODER_SHELL_CUDA_WATCHDOG_MS", WATCHDOG_MS))
        self.plan = S.plan(cycle)
        check_cycle(cycle, self.plan)
        if len(self.plan) + 1 >= LL_SEQ_END:
            raise UsageError(f"persistent-cluster cycle: {len(self.plan)} steps; the kernel's join words number at most "
                             f"{LL_SEQ_END - 2} steps a launch (use --cycle graph)")
        self.broken, self.trace = "", False
        self.threads = block_threads()
        rows = [cycle.geometry.phase(cycle.commands[st.cmd].boundary.phase).rows for st in self.plan]
        q = cycle.geometry.hidden // 1024
        self.dyn_smem = dyn_smem_bytes(q)
        # the most clusters the device holds at once decides the row groups per rank
        probe = self._function(q, max(RPC_BUILDS), fma)
        most = self._max_clusters(probe)
        if most < cycle.ranks:
            raise UsageError(f"persistent-cluster cycle: {drv.gpu} holds {most} clusters of {CL_SIZE} blocks at once; "
                             f"{cycle.ranks} ranks need {cycle.ranks}")
        groups = row_groups(max(rows), cycle.ranks, most, int(os.environ.get("DECODER_SHELL_CUDA_CLUSTER_GROUPS", "0") or 0))
        if cycle.ranks * groups > most:
            raise UsageError(f"persistent-cluster cycle: {cycle.ranks} ranks x {groups} row groups = "
                             f"{cycle.ranks * groups} clusters; {drv.gpu} holds {most} at once")
        per = -(-max(rows) // groups)
        rpc = next((n for n in RPC_BUILDS if n >= per), None)
        if rpc is None:
            raise UsageError(f"persistent-cluster cycle: {max(rows)} rows over {groups} clusters a rank is "
                             f"{per} rows a cluster; the kernel holds at most {max(RPC_BUILDS)}")
        self.groups, self.rpc, self.most = groups, rpc, most
        self.dyn_smem = dyn_smem_bytes(q, rpc)  # (the probe's, unless this build keeps two steps' weights)
        self.func = probe if rpc == max(RPC_BUILDS) else self._function(q, rpc, fma)
        self.blocks = cycle.ranks * groups * CL_SIZE
        table = S.encode(cycle, self.plan, self.addr, lambda r, i: 0)
        self.table_ptr = self._alloc(C.sizeof(table))
        cu.cuMemcpyHtoD(self.table_ptr, C.addressof(table), C.sizeof(table))
        self._tables(table, q)
        n = len(self.plan) + 1
        # (trace: each step's start, the end, then CL_ENTRY_STAMP's block 0 entry and its prologue's pieces)
        self.detail_off = 256 + 8 * (n + PRO_SLOTS)
        self.join_off = self.detail_off + 8 * self.DETAIL_SLOTS * n * self.blocks  # (every block's stamps)
        ctl_bytes = self.join_off + 8 * len(self.plan)  # (unused), error, trace, detail, join counters
        self.ctl = self._alloc(ctl_bytes)
        cu.cuMemsetD8(self.ctl, 0, ctl_bytes)
        # the flag-and-data words of the all-reduces' joins: [2 step parities][ranks][most rows x D] of 64 bits
        # (fp32 all-reduces), then as many of 32 bits (bf16: the number's 16 bits beside the value), zero (no
        # sequence number is 0); each launch's steps carry the next nsteps numbers, all below LL_SEQ_END
        self.ll_stride = max(rows) * cycle.geometry.hidden
        self.ll_bytes = 2 * cycle.ranks * self.ll_stride * (8 + 4)
        self.ll = self._alloc(self.ll_bytes)
        cu.cuMemsetD8(self.ll, 0, self.ll_bytes)
        self.ll_seq = 1
        self.ev_a, self.ev_b = cu.cuEventCreate(0), cu.cuEventCreate(0)

    def _tables(self, table, q: int):
        """Device tables the kernel reads: one 2-D tensor map per (step, rank) over its weights (rows
        o*4Q + u of 1024 lanes, boxes of box_rows(q) rows x 64 lanes), and per step the first rank of every
        element's all-reduce fold (contracts.allreduce.rank_order, the contract itself)."""
        cu, b, cycle = self.cu, self.cu.bindings, self.cycle
        R = cycle.ranks
        box = box_rows(q)
        maps = np.zeros((len(self.plan), R, 16), dtype=np.uint64)
        for k in range(len(self.plan)):
            rows = table[k].nout * 4 * q
            for r in range(R):
                tm = cu.cuTensorMapEncodeTiled(
                    b.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, table[k].mh[r].fn,
                    [b.cuuint64_t(1024), b.cuuint64_t(rows)], [b.cuuint64_t(1024 * 4)],
                    [b.cuuint32_t(1024 // CL_SIZE), b.cuuint32_t(min(box, rows))], [b.cuuint32_t(1), b.cuuint32_t(1)],
                    b.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, b.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
                    b.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    b.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
                maps[k, r] = [int(x) for x in tm.opaque]
        self.maps_ptr = self._alloc(maps.nbytes)
        cu.cuMemcpyHtoD(self.maps_ptr, maps.ctypes.data, maps.nbytes)
        firsts, offs, seen = [], [], {}  # one table per (rows, dtype): the steps of a phase share it
        for k in range(len(self.plan)):
            rows, bf16 = table[k].rows, bool(table[k].mh[0].ring.is_bf16)
            if table[k].fused and (rows, bf16) not in seen:
                seen[rows, bf16] = sum(f.size for f in firsts)
                first = rank_order(cycle.contract, rows * cycle.geometry.hidden, R, 2 if bf16 else 4)[0]
                firsts.append(np.pad(first.astype(np.uint8), (0, -first.size % 256)))
            offs.append(seen.get((rows, bf16), 0))
        blob = np.concatenate(firsts) if firsts else np.zeros(256, dtype=np.uint8)
        self.order_ptr = self._alloc(max(blob.nbytes, 256))
        cu.cuMemcpyHtoD(self.order_ptr, blob.ctypes.data, blob.nbytes)
        off = np.array(offs, dtype=np.int64)
        self.order_off_ptr = self._alloc(off.nbytes)
        cu.cuMemcpyHtoD(self.order_off_ptr, off.ctypes.data, off.nbytes)

    def _function(self, q: int, rpc: int, fma: bool):
        src, entry = source(q, rpc, self.threads, self.cycle.ranks)
        flags = (*(FMA_FLAGS if fma else EXACT_FLAGS), *sinkhorn_flags())
        mod = self.modules._load(compile_cubin(src, self.arch, flags, name="cluster_cycle.cu"))
        func = self.cu.cuModuleGetFunction(mod, entry.encode())
        attr = self.cu.bindings.CUfunction_attribute
        self.cu.cuFuncSetAttribute(func, attr.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        self.cu.cuFuncSetAttribute(func, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.dyn_smem)
        self.entry = entry
        return func

    def _config(self, grid: int):
        b = self.cu.bindings
        cfg = b.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.threads, 1, 1
        cfg.sharedMemBytes = self.dyn_smem
        cfg.hStream = self.stream
        at = b.CUlaunchAttribute()
        at.id = b.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        at.value = self._cluster_dim()
        cfg.attrs = [at]
        cfg.numAttrs = 1
        return cfg

    def _max_clusters(self, func) -> int:
        return int(self.cu.cuOccupancyMaxActiveClusters(func, self._config(CL_SIZE * self.cycle.ranks)))

    def _args(self, mode: int = 0) -> CArgs:
        p = CArgs()
        p.steps, p.nsteps, p.ranks = self.table_ptr, len(self.plan), self.cycle.ranks
        p.join, p.err = self.ctl + self.join_off, self.ctl + 64
        p.timeout_ns = int(self.watchdog_ms * 1e6)
        p.trace = self.ctl + 256 if self.trace else 0
        p.detail = self.ctl + self.detail_off if self.trace else 0
        p.tag = self.tag + 1
        p.rank0, p.nlocal, p.groups = 0, self.cycle.ranks, self.groups
        p.mode, p.skip_step = mode, self.skip_step
        p.tmaps, p.order, p.order_off = self.maps_ptr, self.order_ptr, self.order_off_ptr
        if self.ll_seq + len(self.plan) >= LL_SEQ_END:  # a number would pass 16 bits: the words start again from zero
            self.cu.cuMemsetD8Async(self.ll, 0, self.ll_bytes, self.stream)
            self.ll_seq = 1
        p.ll, p.ll_stride, p.ll_seq0 = self.ll, self.ll_stride, self.ll_seq
        return p

    def _cluster_dim(self):
        """The launch attribute value of 16-block clusters (a direct launch's and the graph node's)."""
        v = self.cu.bindings.CUkernelNodeAttrValue()
        v.clusterDim.x, v.clusterDim.y, v.clusterDim.z = CL_SIZE, 1, 1
        return v

    def _node(self):
        key = self.cu.bindings.CUkernelNodeAttrID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        return self.func, self.blocks, self.threads, self.dyn_smem, [(key, self._cluster_dim())]

    def _start(self, params) -> None:
        self.cu.cuLaunchKernelEx(self._config(self.blocks), self.func, C.addressof(params), 0)

    def _launched(self, p) -> None:
        self.tag += 1  # every join counter grew by the grid's blocks
        self.ll_seq += len(self.plan)  # and every step's words carried a number of their own

    def _stopped(self, step: int) -> str:
        return (f"persistent-cluster cycle: after step {step} ({self._step_name(step)}) a cluster waited more than "
                f"{self.watchdog_ms:g} ms for every rank's arrival ({self.blocks} blocks); the launch was ended by "
                "the watchdog")

    def step_detail(self, mode: int = 0, every_block: bool = False) -> np.ndarray:
        """One traced launch: the stamps inside each step, [steps + 1][DETAIL_SLOTS] ns of cluster 0 block 0
        (0 where not taken), or with every_block [steps + 1][blocks][DETAIL_SLOTS] (block = cluster x 16 + rank
        in the cluster); stamp numbers are cluster_sync.cu's CL_DETAIL."""
        d = self._detail(mode, self.blocks)
        return d if every_block else d[:, 0]

    def barrier_ms(self, reps: int = 20) -> float:
        """Median launch time of the same grid doing only its synchronization (the partials' exchange
        and join of every step), per step."""
        times = sorted(self.launch(mode=1) for _ in range(reps))
        return times[len(times) // 2] / len(self.plan)

    def describe_grid(self) -> dict:
        return {"clusters": self.blocks // CL_SIZE, "cluster_size": CL_SIZE, "row_groups": self.groups,
                "rows_per_cluster_build": self.rpc, "max_active_clusters": self.most, "threads": self.threads, "entry": self.entry}
