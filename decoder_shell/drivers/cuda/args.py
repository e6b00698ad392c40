"""ctypes mirrors of the kernel argument structs in the driver's .cu files (passed by value, one per launch)."""

from __future__ import annotations

import ctypes as C

from ...contracts.allreduce import RingContract

MAXR = 8
u64 = C.c_uint64


class Ring(C.Structure):
    _fields_ = [(n, C.c_int) for n in ("n", "ranks", "cpr", "per", "offset", "dir", "hop", "segments", "is_bf16")]


class ArArgs(C.Structure):
    _fields_ = [("inp", u64 * MAXR), ("out", u64 * MAXR), ("ring", Ring),
                ("rank", C.c_int), ("lo", C.c_int), ("hi", C.c_int), ("mode", C.c_int),
                ("flag_out", u64 * MAXR), ("flag_in", u64), ("epoch", u64)]


class MhcArgs(C.Structure):
    _fields_ = [("x", u64), ("peers", u64 * MAXR), ("ar_out", u64), ("ring", Ring),
                *[(n, u64) for n in ("residual", "post_in", "comb_in", "fn", "base", "scale", "streams", "y",
                                     "post_out", "comb_out", "scratch", "sync")],
                ("M", C.c_int), ("D", C.c_int), ("x_is_bf16", C.c_int), ("sinkhorn_iters", C.c_int),
                ("hc_eps", C.c_float), ("norm_eps", C.c_float), ("split_sinkhorn", C.c_int),
                ("next_fn", u64), ("next_fn_bytes", u64)]


class RmsArgs(C.Structure):
    """rmsnorm.cu's RmsArgs: the fused RMSNorm collapse, in place on an mHC node's y."""
    _fields_ = [("x", u64), ("w", u64), ("y", u64), ("D", C.c_int), ("eps", C.c_float)]


class CopyArgs(C.Structure):
    _fields_ = [("dst", u64 * 4), ("src", u64 * 4), ("nbytes", C.c_uint64 * 4), ("count", C.c_int)]


def ring(contract: RingContract, n: int, ranks: int, is_bf16: bool) -> Ring:
    itemsize = 2 if is_bf16 else 4
    per = max(1, contract.max_chunk_bytes // itemsize) if contract.max_chunk_bytes else 0
    return Ring(n=n, ranks=ranks, cpr=contract.chunks_per_rank, per=per, offset=contract.offset,
                dir=contract.direction, hop=int(contract.accumulation == "hop"), segments=contract.segments,
                is_bf16=int(is_bf16))


class Launch:
    """One kernel launch: function, geometry, dynamic shared bytes and its by-value arguments (ctypes
    objects, kept alive here because the launch's parameter array points into them)."""

    def __init__(self, func, grid, block, *args, shared: int = 0, pdl: bool = False):
        self.func, self.grid, self.block, self.args, self.shared = func, grid, block, args, shared
        self.pdl = pdl  # the kernel waits (griddepcontrol.wait) before it reads what predecessors wrote
        self.params = (C.c_void_p * max(1, len(args)))(*[C.addressof(x) for x in args])

    @property
    def params_ptr(self) -> int:
        return C.addressof(self.params)
