"""Kernel sources, the mHC template instances a cycle needs, and their NVRTC builds into modules.

Where a new kernel is registered: its .cu file goes in SOURCES (compiled into the driver's one
module, after kernels.cu, so it can use the shared helpers) and its fixed entry points in ENTRIES;
launches.py binds its arguments and graph.py's caller (session.py) adds its node. docs/CUDA.md,
"Adding a kernel", walks through it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...contracts.numerics import LANES
from ...errors import UsageError
from ...geometry import DENSE_OPS, MOE_OPS
from . import moe
from .nvrtc import EXACT_FLAGS, FMA_FLAGS, compile_cubin, cuda_include_dirs
from .variants import BASELINE, Node, Variant

#: Source files of the driver's module, in compile order, one job a file (kernels.cu first: the exactness macros, bf16,
#: ordering and the shared arithmetic every other file builds on, the MoE module too; then the ring all-reduce, the
#: Sinkhorn's forms, the mHC boundary kernels, their cluster form, the RMSNorm).
SOURCES = ("kernels.cu", "allreduce.cu", "sinkhorn.cu", "mhc.cu", "mhc_cluster.cu", "rmsnorm.cu")
#: Entry points that are not template instances, looked up by name in the exact build.
ENTRIES = ("allreduce_kernel", "empty_kernel", "copy_kernel", "epoch_kernel", "sinkhorn_kernel", "rmsnorm_kernel")
SOURCE = "".join(Path(__file__).with_name(f).read_text() for f in SOURCES)
BLOCK = 128
NOUT = {"mhc_pre": 24, "mhc_post_pre": 24, "mhc_post_head": 4}
OPNAME = {"mhc_pre": "OP_PRE", "mhc_post_pre": "OP_POST_PRE", "mhc_post_head": "OP_POST_HEAD"}


#: Forms of the Sinkhorn (sinkhorn.cu SINKHORN_FORM), all bit-identical: `lanes` one comb entry per lane
#: with shuffled sums and __fdiv_rn, `lanes-fast` (the default) the same with __fdiv_rn's fast path and
#: no branch on the chain (the lane form made again where an operand leaves its range), `regs` the whole
#: comb in each lane's registers, `regs-shared` the same with each sum's reciprocal shared by its
#: quotients. DECODER_SHELL_CUDA_SINKHORN picks one for both the graph kernels and the persistent
#: cycles, so one run can time them side by side.
SINKHORN_FORMS = {"lanes": 0, "regs": 1, "regs-shared": 2, "lanes-fast": 3}
DEFAULT_SINKHORN = "lanes-fast"  # sinkhorn.cu's SINKHORN_FORM without a flag


def sinkhorn_flags() -> tuple[str, ...]:
    """The compile flag of the Sinkhorn form the environment asks for (none for the default)."""
    name = os.environ.get("DECODER_SHELL_CUDA_SINKHORN", "") or DEFAULT_SINKHORN
    if name not in SINKHORN_FORMS:
        raise UsageError(f"DECODER_SHELL_CUDA_SINKHORN={name}: not one of {', '.join(SINKHORN_FORMS)}")
    return () if name == DEFAULT_SINKHORN else (f"-DSINKHORN_FORM={SINKHORN_FORMS[name]}",)


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


@dataclass(frozen=True)
class KernelSpec:
    """One mHC template instance: its entry name, block size and C++ wrapper follow from these."""

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
        fused = "true" if self.fused else "false"
        if self.cluster:
            return (f'extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__({self.threads}) '
                    f'{self.entry}(const MhcArgs a) {{ mhc_cluster<{NOUT[self.op]}, {OPNAME[self.op]}, '
                    f'{fused}, {self.q}>(a); }}\n')
        dims = "__cluster_dims__(8, 1, 1) " if self.clpre else ""
        return (f'extern "C" __global__ void {dims}__launch_bounds__(BLOCK) {self.entry}(const MhcArgs a) '
                f'{{ mhc_boundary<{NOUT[self.op]}, {self.opg}, {self.rows_per_block}, {OPNAME[self.op]}, '
                f'{fused}, {self.q}, {"true" if self.clpre else "false"}>(a); }}\n')


def spec_for(cycle, cmd, var: Variant, sm: int) -> KernelSpec:
    """The mHC kernel instance that runs `cmd` as `var` on a device of compute capability `sm`."""
    rows = cycle.geometry.phase(cmd.boundary.phase).rows
    d = cycle.geometry.hidden
    if var.cluster:
        return KernelSpec(cmd.op, 1, var.fused, d // LANES, cluster=True)
    rpb = min(var.rows or 1, rows)
    q = d // LANES if d % LANES == 0 and d // LANES <= 8 and rpb * 4 * (d // LANES) <= 64 else 0
    opg = outputs_per_block(cmd.op, rows)
    # clusters finish pre from output group 0 alone, which then has to hold all HC pre outputs
    return KernelSpec(cmd.op, rpb, var.fused, q, opg=opg, clpre=var.cluster_pre and sm >= 90 and opg >= 4)


def func_key(spec: KernelSpec, var: Variant) -> str:
    return spec.entry + (":fma" if var.fma else "")


def user_key(cand) -> str:
    return f"user:{cand.digest}:{cand.entry}:{' '.join(cand.options)}"


class Modules:
    """The loaded modules of one session and their functions by key; unload() frees what was loaded,
    also after a build that failed half way."""

    def __init__(self, cu, arch: str):
        self.cu, self.arch = cu, arch
        self.modules: list = []
        self.funcs: dict = {}

    def _load(self, image: bytes):
        mod = self.cu.cuModuleLoadData(image)
        self.modules.append(mod)
        return mod

    def build(self, cycle, variants: dict, sm: int) -> None:
        specs, fma, moe_ops = {}, set(), False
        for cmd in cycle.commands:
            var = variants.get(cmd.index, BASELINE)
            if cmd.op in MOE_OPS or cmd.op in DENSE_OPS:
                moe_ops |= isinstance(var, Variant) and var.node is Node.OWN
            elif cmd.op != "allreduce" and isinstance(var, Variant) and var.node is Node.OWN:
                sp = spec_for(cycle, cmd, var, sm)
                specs[sp.entry] = sp
                if var.fma:
                    fma.add(sp.entry)
        src = SOURCE + "".join(sp.wrapper() for sp in specs.values())
        for flags, names, suffix in ((EXACT_FLAGS, [*specs, *ENTRIES], ""), (FMA_FLAGS, sorted(fma), ":fma")):
            if names:
                mod = self._load(compile_cubin(src, self.arch, (*flags, *sinkhorn_flags())))
                for n in names:
                    self.funcs[n + suffix] = self.cu.cuModuleGetFunction(mod, n.encode())
        if moe_ops:  # the MoE draft kernels: their own module (moe.py assembles it on kernels.cu's prelude)
            mod = self._load(moe.build(self.arch))
            for n in (*moe.KERNELS, *moe.DENSE_KERNELS):
                self.funcs[n] = self.cu.cuModuleGetFunction(mod, n.encode())
        for cand in {id(v): v for v in variants.values() if not isinstance(v, Variant)}.values():
            if cand.kind == "source":
                image = compile_cubin(cand.code.decode(), self.arch, (*cand.options, *cuda_include_dirs()),
                                      name=f"{cand.name}.cu")
            else:
                image = cand.code + (b"\0" if cand.language == "ptx" else b"")
            self.funcs[user_key(cand)] = self.cu.cuModuleGetFunction(self._load(image), cand.entry.encode())

    def unload(self) -> None:
        while self.modules:
            self.cu.cuModuleUnload(self.modules.pop())

