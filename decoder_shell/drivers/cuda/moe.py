"""The MoE draft kernels (moe.cu): source assembly, NVRTC build, the ml_dtypes decode tables, and the
argument struct mirrored in ctypes.

The source is kernels.cu's arithmetic prelude (everything up to and including `psigmoid`: ADD/MUL/DIV,
bf16 rounding, pexp, PDL waits), the contracts' fp32 constants as exact bit patterns, then moe.cu: the
MoE kernels share every bit of arithmetic with the mHC kernels instead of restating it.
"""

from __future__ import annotations

import ctypes as C
from pathlib import Path

import numpy as np

from ...contracts.act_qdq import AMAX_FLOOR, INV_E4M3_MAX
from ...contracts.moe_gate import NORM_EPS, ROUTE_SCALE
from ...contracts.numerics import F32, LOG1P_POLY
from ...contracts.quant import decode_tables
from ...errors import BuildError
from .nvrtc import EXACT_FLAGS, compile_cubin

HERE = Path(__file__).parent
PRELUDE_END = "__device__ __forceinline__ float psigmoid"
WARPS = 8  # MOE_WARPS: output rows per block of the linear kernels
MAX_SLOTS = 512  # MOE_MAX_SLOTS: routed slots (rows x top-k) of one linear launch
MAX_EXPERTS = 32 * 128  # 32 x MOE_ID_WORDS: routed experts of one linear launch
FORMATS = {"mxfp4": 0, "fp8": 1, "bf16": 2}
#: The expert linear kernels: "warp" (moe.cu: one warp per output row, table decode) and "spread"
#: (moe_routed.cu: the (row, 32-group) sums spread evenly over the block, weights decoded without a
#: table, each expert's weights read once for all its slots of a pass). Same bits, same block columns.
LINEAR_KERNELS = ("warp", "spread")
#: What the cuda driver runs unless a gate candidate says otherwise: "spread", since an H200 run
#: (2026-12-01, docs/BENCHMARKS.md) showed it exact on every tools/cuda_check_moe.py case and 1.4x-1.9x
#: faster for the routed command, and `shell gate --candidate experts=moe-spread` on a dsv41-draft corpus
#: exact with 0.176 ms/cycle saved (conservative); `experts=moe-warp` selects the older kernels.
DEFAULT_LINEAR = "spread"
SPREAD_SMEM_FLOATS = 11008  # SP_SMEM_FLOATS of moe_routed.cu
SPREAD_THREADS = 256  # the spread kernels' largest block
SPREAD_MAX_BATCH = 4  # SP_MAX_BATCH of moe_routed.cu: an expert's slots per pass
SPREAD_UP_ROWS, SPREAD_DOWN_ROWS = 16, 32  # SP_UP_ROWS, SP_DOWN_ROWS: output rows per block
#: The gate kernels: "row" (moe_gate: one 1024-thread block per row, all E experts) and "split"
#: (moe_gate_split_g<G>: a block per (row, G experts), the row's last block to arrive routes it).
#: Same gate_dots and gate_route, so the same bits. "split" is the default since the H200 run of
#: 2026-12-01 (docs/BENCHMARKS.md): ids and weights exact on every tools/cuda_check_moe.py case, ties
#: included, for every G; the gate alone 0.019 ms against 0.085 (T = 5, one rank, D 5120, 128 experts).
GATE_KERNELS = ("row", "split")
DEFAULT_GATE = "split"
GATE_GROUPS = (2, 4, 8)  # experts per block of the split gate kernels built (moe_gate_split_g<G>)
GATE_GROUP = 4  # the one the split gate runs (the others are built for timing them side by side)
KERNELS = ("moe_qdq", "moe_gate", *(f"moe_gate_split_g{g}" for g in GATE_GROUPS), "moe_combine",
           "moe_combine_official", "moe_round_bf16", "moe_expand",
           *(f"moe_{s}_{f}" for s in ("up", "down") for f in FORMATS),
           *(f"moe_{s}_spread_{f}" for s in ("up", "down") for f in FORMATS))
#: The draft's dense projections (grouped linear, bf16 or fp32 out) in the same module.
DENSE_KERNELS = tuple(f"dense_{f}_{o}" for f in ("fp8", "bf16") for o in ("bf16", "f32"))


def _bits(v) -> str:
    return f"__uint_as_float(0x{int(np.asarray(v, F32).view(np.uint32)):08x}u)"


def constants() -> str:
    """#defines of the contracts' fp32 constants, bit for bit (no decimal literal re-rounding)."""
    lines = [f"#define LOG1P_C{j} {_bits(c)}" for j, c in enumerate(LOG1P_POLY)]
    lines += [f"#define AMAX_FLOOR {_bits(AMAX_FLOOR)}", f"#define INV_E4M3_MAX {_bits(INV_E4M3_MAX)}",
              f"#define GATE_EPS {_bits(NORM_EPS)}"]
    return "\n".join(lines) + "\n"


def source() -> str:
    base = (HERE / "kernels.cu").read_text()
    at = base.find(PRELUDE_END)
    if at < 0:
        raise BuildError("kernels.cu no longer defines psigmoid: the MoE kernels cannot take its prelude")
    prelude = base[:base.index("\n", at) + 1]
    return prelude + constants() + (HERE / "moe.cu").read_text() + (HERE / "moe_routed.cu").read_text()


def build(arch: str = "sm_90") -> bytes:
    """NVRTC cubin of every MoE kernel (exact flags); a build error raises BuildError (exit 4)."""
    return compile_cubin(source(), arch, EXACT_FLAGS, name="moe.cu")


u64 = C.c_uint64


class MoeLin(C.Structure):
    """Mirror of `struct MoeLin` in moe.cu (passed by value)."""

    _fields_ = [("xc", u64), ("xs", u64), ("ids", u64), ("rw", u64), ("rows", C.c_int), ("topk", C.c_int),
                ("act_per_slot", C.c_int), ("w", u64), ("s", u64),
                ("w_estride", C.c_longlong), ("w_mstride", C.c_longlong), ("w_rstride", C.c_longlong),
                ("s_estride", C.c_longlong), ("s_mstride", C.c_longlong),
                ("K", C.c_int), ("N", C.c_int), ("out", u64), ("tables", u64), ("experts", C.c_int)]


def strides(fmt: str, experts: int, mats: int, n: int, k: int) -> dict:
    """Byte strides of a weight stack [experts, mats, n, k] (codes) and its scales."""
    row = {"mxfp4": k // 2, "fp8": k, "bf16": 2 * k}[fmt]
    srow = {"mxfp4": (n, k // 32), "fp8": (n // 32, k // 32), "bf16": (0, 0)}[fmt]
    smat = srow[0] * srow[1]
    return dict(w_rstride=row, w_mstride=row * n, w_estride=row * n * mats, s_mstride=smat, s_estride=smat * mats)


def qdq_launch(funcs: dict, x: int, codes: int, scales: int, rows: int, k: int):
    """act_qdq of a bf16 [rows, k] at x into E4M3 codes and E8M0 scales."""
    from .args import Launch
    return Launch(funcs["moe_qdq"], (-(-(k // 32) // 8), rows, 1), (256, 1, 1),
                  u64(x), u64(codes), u64(scales), C.c_int(rows), C.c_int(k), pdl=True)


def gate_groups(e: int, group: int = GATE_GROUP) -> int:
    """Blocks per row of the split gate: `group` experts each."""
    return -(-e // group)


def gate_scratch_bytes(rows: int, e: int) -> dict[str, int]:
    """The split gate's scratch: fp32 linear sums [rows, E] and a 64-bit arrival count per row
    (zeroed once with the work arena; it only grows)."""
    return {"scores": 4 * rows * e, "count": 8 * rows}


def gate_launch(funcs: dict, x: int, w: int, bias: int, ids: int, wts: int, rows: int, d: int, e: int, topk: int,
                route_scale: float = float(ROUTE_SCALE), *, kernel: str = DEFAULT_GATE, scores: int = 0,
                count: int = 0, group: int = GATE_GROUP):
    """The gate of `rows` rows: "row" one block per row; "split" a (rows, gate_groups(e, group)) grid
    whose scratch (gate_scratch_bytes) is at `scores` and `count`."""
    from .args import Launch
    if kernel not in GATE_KERNELS:
        raise ValueError(f"gate kernel must be one of {GATE_KERNELS}, not {kernel!r}")
    if e > 1024 or topk > 16:
        raise ValueError("the gate kernel takes at most 1024 experts and top-16")
    tail = (u64(ids), u64(wts), C.c_int(rows), C.c_int(d), C.c_int(e), C.c_int(topk), C.c_float(route_scale))
    if kernel == "row":
        return Launch(funcs["moe_gate"], (rows, 1, 1), (1024, 1, 1), u64(x), u64(w), u64(bias), *tail, pdl=True)
    if not scores or not count:
        raise ValueError("the split gate needs its scores and count scratch")
    if group not in GATE_GROUPS:
        raise ValueError(f"split gate groups are {GATE_GROUPS} experts, not {group}")
    return Launch(funcs[f"moe_gate_split_g{group}"], (rows, gate_groups(e, group), 1), (1024, 1, 1), u64(x), u64(w), u64(bias),
                  u64(scores), u64(count), *tail, pdl=True)


def spread_rows(mats: int) -> int:
    """Output rows per block of a spread kernel: SP_UP_ROWS (two matrices) or SP_DOWN_ROWS."""
    return SPREAD_UP_ROWS if mats == 2 else SPREAD_DOWN_ROWS


def _spread_slot_floats(k: int, mats: int) -> int:
    return k + mats * spread_rows(mats) * (k // 32)  # moe_routed.cu: K + MATS x ROWS x G floats a slot


def spread_fits(n: int, k: int, mats: int) -> bool:
    """Whether the spread kernel takes an [n, k] linear: whole blocks of rows, and one slot's decoded
    activation row and group sums in its shared memory."""
    return n % spread_rows(mats) == 0 and _spread_slot_floats(k, mats) <= SPREAD_SMEM_FLOATS


def spread_shared_bytes(k: int, mats: int) -> int:
    """The spread kernel's dynamic shared memory: as many slots per pass (up to SP_MAX_BATCH) as
    SP_SMEM_FLOATS holds, the formula the kernel computes its pass size with."""
    per_slot = _spread_slot_floats(k, mats)
    return 4 * min(SPREAD_MAX_BATCH, SPREAD_SMEM_FLOATS // per_slot) * per_slot


def spread_threads(k: int, mats: int) -> int:
    """Block size of a spread kernel: the ROWS x K/32 (row, group) tasks in as few rounds as 256 threads
    allow, on as few whole warps as keep that number of rounds (no round but the last part-idle: up at
    K = 1152 has 288 tasks, two rounds of 160 threads rather than 256 + 32)."""
    tasks = spread_rows(mats) * (k // 32)
    rounds = -(-tasks // SPREAD_THREADS)
    return 32 * -(-tasks // (32 * rounds))


def linear_launch(funcs: dict, tables: int, stage: str, fmt: str, *, xc: int, xs: int, ids: int, rw: int, rows: int,
                  topk: int, act_per_slot: bool, w: int, s: int, experts: int, mats: int, n: int, k: int, out: int,
                  kernel: str = DEFAULT_LINEAR):
    """`stage` "up" (w1/w3 pair -> bf16 h) or "down" (-> fp32); ids 0 for a dense (shared) expert.
    `kernel` "spread" takes the spread kernel where it fits (spread_fits; else the warp kernel: same
    bits)."""
    from .args import Launch
    if kernel not in LINEAR_KERNELS:
        raise ValueError(f"expert linear kernel must be one of {LINEAR_KERNELS}, not {kernel!r}")
    if n % WARPS or k % 32:
        raise ValueError(f"linear shape {n} x {k} is off the grid ({WARPS} rows, 32 inputs)")
    if ids and experts > MAX_EXPERTS:
        raise ValueError(f"{experts} routed experts are more than the {MAX_EXPERTS} a linear launch takes")
    if ids and rows * topk > MAX_SLOTS:
        raise ValueError(f"{rows} rows x top-{topk} is more than the {MAX_SLOTS} routed slots a launch takes")
    st = strides(fmt, experts, mats, n, k)
    args = MoeLin(xc=xc, xs=xs, ids=ids, rw=rw, rows=rows, topk=topk, act_per_slot=int(act_per_slot), w=w,
                  s=s, K=k, N=n, out=out, tables=tables, experts=experts, **st)
    # routed: block column x serves the x-th smallest distinct expert id (at most one per slot)
    columns = min(experts, rows * topk) if ids else experts
    if kernel == "spread" and spread_fits(n, k, mats):
        return Launch(funcs[f"moe_{stage}_spread_{fmt}"], (columns, n // spread_rows(mats), 1),
                      (spread_threads(k, mats), 1, 1), args, shared=spread_shared_bytes(k, mats), pdl=True)
    return Launch(funcs[f"moe_{stage}_{fmt}"], (columns, n // WARPS, 1), (WARPS * 32, 1, 1), args, pdl=True)


def combine_launch(funcs: dict, slots: int, shared: int, ids: int, out: int, rows: int, topk: int, d: int):
    from .args import Launch
    return Launch(funcs["moe_combine"], (-(-d // 256), rows, 1), (256, 1, 1), u64(slots), u64(shared),
                  u64(ids), u64(out), C.c_int(rows), C.c_int(topk), C.c_int(d), pdl=True)


def combine_official_launch(funcs: dict, slots: int, shared: int, ids: int, out: int, rows: int, topk: int, d: int):
    """The exact-official epilogue on the all-reduced fp32 slot and shared sums; bf16 out [rows, d]."""
    from .args import Launch
    return Launch(funcs["moe_combine_official"], (-(-d // 256), rows, 1), (256, 1, 1), u64(slots), u64(shared),
                  u64(ids), u64(out), C.c_int(rows), C.c_int(topk), C.c_int(d), pdl=True)


def round_launch(funcs: dict, x: int, out: int, n: int):
    """fp32 [n] -> bf16 [n], round to nearest even (the fused combine's one rounding)."""
    from .args import Launch
    return Launch(funcs["moe_round_bf16"], (max(1, -(-n // 256)), 1, 1), (256, 1, 1), u64(x), u64(out), C.c_int(n),
                  pdl=True)


def expand_launch(funcs: dict, tables: int, fmt: str, codes: int, scales: int, out: int, rows: int, k: int):
    """Decode a packed stack of `rows` weight rows of width k (MXFP4 or FP8 blocks) once to bf16."""
    from .args import Launch
    blocks = max(1, min(4096, -(-rows * k // 256)))
    return Launch(funcs["moe_expand"], (blocks, 1, 1), (256, 1, 1), u64(codes), u64(scales), u64(out),
                  C.c_longlong(rows), C.c_int(k), C.c_int(FORMATS[fmt]), C.c_int(1 if fmt == "mxfp4" else 32),
                  u64(tables))


def expert_launches(funcs: dict, tables: int, fmt: str, *, xc: int, xs: int, ids: int, rw: int, rows: int, topk: int,
                    w13: int, s13: int, w2: int, s2: int, experts: int, width: int, d: int, h: int, hc: int, hs: int,
                    out: int, kernel: str = DEFAULT_LINEAR) -> list:
    """One expert command (routed: ids and route weights; shared: ids = rw = 0, topk 1): w1/w3 with the
    SwiGLU epilogue into bf16 h [slots, width], act_qdq of h, w2 into fp32 [slots, d]."""
    slots = rows * (topk if ids else 1)
    return [linear_launch(funcs, tables, "up", fmt, xc=xc, xs=xs, ids=ids, rw=rw, rows=rows, topk=topk,
                          act_per_slot=False, w=w13, s=s13, experts=experts, mats=2, n=width, k=d, out=h,
                          kernel=kernel),
            qdq_launch(funcs, h, hc, hs, slots, width),
            linear_launch(funcs, tables, "down", fmt, xc=hc, xs=hs, ids=ids, rw=0, rows=rows, topk=topk,
                          act_per_slot=True, w=w2, s=s2, experts=experts, mats=1, n=d, k=width, out=out,
                          kernel=kernel)]


def dense_launch(funcs: dict, tables: int, fmt: str, out_dtype: str, *, xc: int, xs: int, w: int, s: int, rows: int,
                 groups: int, n: int, k: int, out: int):
    """A dense projection (contracts/dense.py): `groups` weights [n, k] (FP8 codes + 32x32 scales, or
    bf16) over an activation of groups*k codes per row; out [rows, groups*n] bf16 or fp32."""
    from .args import Launch
    if n % WARPS or k % 32 or fmt not in ("fp8", "bf16"):
        raise ValueError(f"dense shape {n} x {k} ({fmt}) is off the grid ({WARPS} rows, 32 inputs)")
    st = strides(fmt, groups, 1, n, k)
    args = MoeLin(xc=xc, xs=xs, ids=0, rw=0, rows=rows, topk=1, act_per_slot=0, w=w, s=s, K=k, N=n, out=out,
                  tables=tables, experts=groups, **st)
    o = {"bfloat16": "bf16", "float32": "f32"}[out_dtype]
    return Launch(funcs[f"dense_{fmt}_{o}"], (groups, n // WARPS, 1), (WARPS * 32, 1, 1), args, pdl=True)


class MoeDevice:
    """The MoE kernels on one device: module, decode tables, device arrays and launches (cuda-python
    driver API through drivers/cuda/api.Checked). Routing stays on the device; launch dimensions
    come from the shapes only."""

    def __init__(self, cu, arch: str):
        self.cu = cu
        self.module = cu.cuModuleLoadData(build(arch))
        self.funcs = {n: cu.cuModuleGetFunction(self.module, n.encode()) for n in KERNELS}
        self.funcs.update({n: cu.cuModuleGetFunction(self.module, n.encode()) for n in DENSE_KERNELS})
        self.allocs: list[int] = []
        self.tables = self.upload(decode_tables())

    # --- memory ---------------------------------------------------------------------------------
    def empty(self, nbytes: int) -> int:
        ptr = int(self.cu.cuMemAlloc(max(int(nbytes), 256)))
        self.allocs.append(ptr)
        return ptr

    def upload(self, a: np.ndarray) -> int:
        a = np.ascontiguousarray(a)
        ptr = self.empty(a.nbytes)
        self.cu.cuMemcpyHtoD(ptr, a.ctypes.data, a.nbytes)
        return ptr

    def download(self, ptr: int, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        self.cu.cuMemcpyDtoH(out.ctypes.data, ptr, out.nbytes)
        return out

    def reset(self) -> None:
        """Free every array but the decode tables."""
        for p in self.allocs:
            if p != self.tables:
                self.cu.cuMemFree(p)
        self.allocs = [self.tables]

    def close(self) -> None:
        for p in self.allocs:
            self.cu.cuMemFree(p)
        self.allocs.clear()

    # --- launches -------------------------------------------------------------------------------
    def qdq(self, x: int, codes: int, scales: int, rows: int, k: int):
        return qdq_launch(self.funcs, x, codes, scales, rows, k)

    def gate(self, x: int, w: int, bias: int, ids: int, wts: int, rows: int, d: int, e: int, topk: int,
             route_scale: float = float(ROUTE_SCALE), kernel: str = DEFAULT_GATE, scores: int = 0, count: int = 0,
             group: int = GATE_GROUP):
        return gate_launch(self.funcs, x, w, bias, ids, wts, rows, d, e, topk, route_scale, kernel=kernel,
                           scores=scores, count=count, group=group)

    def linear(self, stage: str, fmt: str, **kw):
        """`stage` "up" (w1/w3 pair -> bf16 h) or "down" (-> fp32); ids 0 for a dense (shared) expert."""
        return linear_launch(self.funcs, self.tables, stage, fmt, **kw)

    def dense(self, fmt: str, out_dtype: str, **kw):
        return dense_launch(self.funcs, self.tables, fmt, out_dtype, **kw)

    def combine(self, slots: int, shared: int, ids: int, out: int, rows: int, topk: int, d: int):
        return combine_launch(self.funcs, slots, shared, ids, out, rows, topk, d)

    def combine_official(self, slots: int, shared: int, ids: int, out: int, rows: int, topk: int, d: int):
        return combine_official_launch(self.funcs, slots, shared, ids, out, rows, topk, d)

    def launch(self, launches, stream) -> None:
        for ln in launches:
            self.cu.cuLaunchKernel(ln.func, *ln.grid, *ln.block, ln.shared, stream, ln.params_ptr, 0)
