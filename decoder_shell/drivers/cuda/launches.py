"""Launch arguments: each command's kernel, grid and by-value argument struct on one rank.

Binding reads only the cycle, the arena addresses, the built functions and the command's variant;
it allocates nothing but the `peers:` tables of user kernels (owned by the arenas).
"""

from __future__ import annotations

import ctypes as C
import os

import numpy as np

from ...commands import dense_ops
from ...contracts.allreduce import RingContract
from ...contracts.numerics import BF16, LANES
from . import args as A
from . import moe as M
from .kernels import BLOCK, NOUT, func_key, spec_for, user_key
from .variants import Variant


class Binder:
    def __init__(self, cycle, arenas, funcs: dict, sm: int, *, rank: int | None):
        self.cycle, self.mem, self.funcs, self.sm, self.rank = cycle, arenas, funcs, sm, rank
        mhc = [c for c in cycle.commands if c.op.startswith("mhc")]
        self.next_mhc = {a.index: b for a, b in zip(mhc, mhc[1:])}  # whose weights idle blocks prefetch

    def allreduce(self, cmd, rank: int, mode: int, contract: RingContract, lo: int, hi: int,
                  piece: int = 0, bufs: tuple[int, int] | None = None, n: int | None = None) -> A.Launch:
        """mode 0 one-shot, 1 reduce-scatter, 2 all-gather; [lo, hi) the elements of this piece.
        `bufs` (input, output buffer ids) and `n` sum other buffers than the command's own (the fused
        combine reuses the buffers and arrival slots of the official chain it replaces)."""
        R, mem = self.cycle.ranks, self.mem
        bx, bo = bufs or (cmd.inputs["x"], cmd.outputs["out"])
        buf = self.cycle.buffers[bx]
        n = int(np.prod(buf.shape)) if n is None else n
        a = A.ArArgs()
        for q in range(R):
            a.inp[q] = mem.addr(q, bx)
            a.out[q] = mem.addr(q, bo)
        a.ring = A.ring(contract, n, R, buf.dtype == BF16)
        a.rank, a.lo, a.hi, a.mode = rank, lo, hi, mode
        if self.rank is not None:  # one process per rank: arrival slots (see arrive_and_wait)
            off = mem.slots[cmd.index] + 8 * R * piece
            for q in range(R):
                a.flag_out[q] = mem.work(q, off + 8 * rank)
            a.flag_in = mem.work(rank, off)
            a.epoch = mem.work(rank, mem.epoch_off)
        threads = 256
        blocks = max(1, min(1024, -(-(hi - lo) // threads)))
        return A.Launch(self.funcs["allreduce_kernel"], (blocks, 1, 1), (threads, 1, 1), a, pdl=True)

    def mhc(self, cmd, rank: int, var: Variant, prev_ar=None) -> A.Launch:
        g, mem = self.cycle.geometry, self.mem
        sp = spec_for(self.cycle, cmd, var, self.sm)
        rows = g.phase(cmd.boundary.phase).rows
        a = A.MhcArgs()
        ins, outs = cmd.inputs, cmd.outputs
        a.x = mem.addr(rank, ins["x"])
        xbuf = self.cycle.buffers[ins["x"]]
        a.x_is_bf16 = int(xbuf.dtype == BF16)
        if sp.fused:
            px = prev_ar.inputs["x"]
            for q in range(self.cycle.ranks):
                a.peers[q] = mem.addr(q, px)
            a.ar_out = mem.addr(rank, prev_ar.outputs["out"])
            a.ring = A.ring(self.cycle.contract, int(np.prod(xbuf.shape)), self.cycle.ranks, xbuf.dtype == BF16)
        for name in ("residual", "post", "comb"):
            if name in ins:
                setattr(a, {"post": "post_in", "comb": "comb_in"}.get(name, name), mem.addr(rank, ins[name]))
        a.fn, a.base, a.scale = (mem.addr(rank, ins[k]) for k in ("fn", "base", "scale"))
        a.streams, a.y = mem.addr(rank, outs["streams"]), mem.addr(rank, outs["y"])
        if "next_post" in outs:
            a.post_out, a.comb_out = mem.addr(rank, outs["next_post"]), mem.addr(rank, outs["next_comb"])
        a.scratch = mem.work(rank, mem.scratch[cmd.index])
        a.sync = mem.work(rank, mem.sync[cmd.index])
        a.M, a.D = rows, g.hidden
        a.sinkhorn_iters = g.mhc.sinkhorn_iters
        a.hc_eps, a.norm_eps = g.mhc.hc_eps, g.mhc.norm_eps
        # the comb by the Sinkhorn node (1; 2 also finishing the mixes) or in the kernel (0); never 0 for a
        # cluster kernel with a comb: it has none of its own
        a.split_sinkhorn = (0 if "next_comb" not in outs or var.sinkhorn_inline else 2 if sp.clpre else 1)
        nxt = self.next_mhc.get(cmd.index)
        if nxt is not None and os.environ.get("DECODER_SHELL_CUDA_PREFETCH", "1") != "0":
            a.next_fn = mem.addr(rank, nxt.inputs["fn"])
            a.next_fn_bytes = self.cycle.buffers[nxt.inputs["fn"]].nbytes
        func = self.funcs[func_key(sp, var)]
        if sp.cluster:
            return A.Launch(func, (LANES // BLOCK, rows, 1), (sp.threads, 1, 1), a, pdl=True)
        grid = (LANES // BLOCK, NOUT[cmd.op] // sp.opg, -(-rows // sp.rows_per_block))
        return A.Launch(func, grid, (BLOCK, 1, 1), a, pdl=True)

    def moe(self, cmd, rank: int, var: Variant) -> list[A.Launch]:
        """A MoE command's launches on one rank (docs/MOE.md): one kernel, or for the expert commands
        w1/w3 -> act_qdq(h) -> w2 through this command's scratch. Packed weights run the MXFP4 (routed)
        or FP8 (shared) kernels, expanded ones the bf16 kernels; the variant may pick the linear kernel
        (warp or spread, same bits) and the gate kernel (row or split, same bits)."""
        g, mem, f = self.cycle.geometry, self.mem, self.funcs
        rows = g.phase(cmd.boundary.phase).rows
        d, e, k, width = g.hidden, g.moe.experts, g.moe.top_k, g.moe.width // g.ranks
        t = {n: mem.addr(rank, b) for n, b in {**cmd.inputs, **cmd.outputs}.items()}
        if cmd.op == "moe_qdq":
            return [M.qdq_launch(f, t["x"], t["codes"], t["scales"], rows, d)]
        if cmd.op == "moe_gate":
            sc = {n: mem.work(rank, off) for n, off in mem.moe_scratch[cmd.index].items()}
            return [M.gate_launch(f, t["x"], t["weight"], t["bias"], t["ids"], t["weights"], rows, d, e, k,
                                  kernel=var.gate or M.DEFAULT_GATE, scores=sc["scores"], count=sc["count"])]
        if cmd.op == "moe_combine":
            return [M.combine_launch(f, t["slots"], t["shared"], t["ids"], t["out"], rows, k, d)]
        if cmd.op == "moe_combine_official":
            return [M.combine_official_launch(f, t["slots"], t["shared"], t["ids"], t["out"], rows, k, d)]
        routed = cmd.op == "moe_routed"
        packed = g.moe.weights == "packed" and not var.expanded
        fmt = ("mxfp4" if routed else "fp8") if packed else "bf16"
        if var.expanded:
            t.update({n: mem.expanded_addr(rank, cmd.index, n) for n in ("w13", "w2")})
        sc = {n: mem.work(rank, off) for n, off in mem.moe_scratch[cmd.index].items()}
        return M.expert_launches(f, mem.work(rank, mem.tables_off), fmt, xc=t["codes"], xs=t["scales"],
                                 ids=t["ids"] if routed else 0, rw=t["weights"] if routed else 0, rows=rows,
                                 topk=k if routed else 1, w13=t["w13"], s13=t["s13"] if packed else 0, w2=t["w2"],
                                 s2=t["s2"] if packed else 0, experts=e if routed else 1, width=width, d=d,
                                 h=sc["h"], hc=sc["hc"], hs=sc["hs"], out=t["slots" if routed else "y"],
                                 kernel=var.linear or M.DEFAULT_LINEAR)

    def dense(self, cmd, rank: int, var: Variant) -> list[A.Launch]:
        """A dense attention command's launch on one rank (commands/dense_ops.py): `moe_qdq` for a
        quantize command, one grouped-linear kernel (FP8 packed or bf16 expanded weights; `moe-expanded`:
        the bf16 copy decoded on the device) for a projection."""
        g, mem, f = self.cycle.geometry, self.mem, self.funcs
        rows = g.phase(cmd.boundary.phase).rows
        t = {n: mem.addr(rank, b) for n, b in {**cmd.inputs, **cmd.outputs}.items()}
        if dense_ops.is_qdq(cmd.op):
            return [M.qdq_launch(f, t["x"], t["codes"], t["scales"], rows, dense_ops.qdq_width(cmd.op, g))]
        groups, n, k, out = dense_ops.linear_shape(cmd.op, g)
        packed = g.moe.weights == "packed" and not var.expanded
        if var.expanded:
            t["w"] = mem.expanded_addr(rank, cmd.index, "w")
        return [M.dense_launch(f, mem.work(rank, mem.tables_off), "fp8" if packed else "bf16", out, xc=t["codes"],
                               xs=t["scales"], w=t["w"], s=t["s"] if packed else 0, rows=rows, groups=groups, n=n,
                               k=k, out=t["y"])]

    def fused_combine(self, cmd, rank: int) -> tuple[A.Launch, A.Launch, A.Launch]:
        """The `fused` candidate of a moe_combine_official on one rank, in three launches over the
        buffers of the official chain it replaces (the slot and shared all-reduces do not run):
        (1) moe_combine: this rank's slot partials in ascending id + its shared partial -> the shared
        all-reduce's out [M, D]; (2) the fp32 all-reduce of those -> the slot all-reduce's out (its
        first M*D elements); (3) one bf16 rounding into the command's out. Returns (1, 2, 3)."""
        from ...commands.program import official_feeds
        g, mem = self.cycle.geometry, self.mem
        rows, d, k = g.phase(cmd.boundary.phase).rows, g.hidden, g.moe.top_k
        slots_ar, shared_ar = official_feeds(self.cycle, cmd)
        fused, total = shared_ar.outputs["out"], slots_ar.outputs["out"]
        comb = M.combine_launch(self.funcs, mem.addr(rank, slots_ar.inputs["x"]), mem.addr(rank, shared_ar.inputs["x"]),
                                mem.addr(rank, cmd.inputs["ids"]), mem.addr(rank, fused), rows, k, d)
        ar = self.allreduce(shared_ar, rank, 0, self.cycle.contract, 0, rows * d, bufs=(fused, total), n=rows * d)
        rnd = M.round_launch(self.funcs, mem.addr(rank, total), mem.addr(rank, cmd.outputs["out"]), rows * d)
        return comb, ar, rnd

    def expand(self, cmd, rank: int) -> list[A.Launch]:
        """The decode of a `moe-expanded` command's packed w13 and w2 into its bf16 copies (run once after
        the params are written, outside the graph)."""
        mem, fmt = self.mem, "mxfp4" if cmd.op == "moe_routed" else "fp8"
        out = []
        for w, s in ((("w", "s"),) if "w" in cmd.inputs else (("w13", "s13"), ("w2", "s2"))):
            shape = self.cycle.buffers[cmd.inputs[w]].shape
            k = shape[-1] * (2 if fmt == "mxfp4" else 1)
            out.append(M.expand_launch(self.funcs, mem.work(rank, mem.tables_off), fmt, mem.addr(rank, cmd.inputs[w]),
                                       mem.addr(rank, cmd.inputs[s]), mem.expanded_addr(rank, cmd.index, w),
                                       int(np.prod(shape[:-1])), k))
        return out

    def rmsnorm(self, cmd, rank: int) -> A.Launch:
        """The fused RMSNorm of a fused_norm geometry's hc_pre: rewrites the mHC node's y in place."""
        g, mem = self.cycle.geometry, self.mem
        a = A.RmsArgs()
        a.x = a.y = mem.addr(rank, cmd.outputs["y"])
        a.w = mem.addr(rank, cmd.inputs["norm_weight"])
        a.D, a.eps = g.hidden, g.mhc.norm_eps
        rows = g.phase(cmd.boundary.phase).rows
        return A.Launch(self.funcs["rmsnorm_kernel"], (rows, 1, 1), (LANES, 1, 1), a, pdl=True)

    def sinkhorn(self, mhc: A.Launch) -> A.Launch:
        """The Sinkhorn node of an mHC launch that left its comb to it (same argument struct)."""
        return A.Launch(self.funcs["sinkhorn_kernel"], (1, 1, 1), (BLOCK, 1, 1), mhc.args[0], pdl=True)

    def epoch(self, rank: int) -> A.Launch:
        return A.Launch(self.funcs["epoch_kernel"], (1, 1, 1), (1, 1, 1), C.c_uint64(self.mem.work(rank, self.mem.epoch_off)))

    def empty(self) -> A.Launch:
        return A.Launch(self.funcs["empty_kernel"], (1, 1, 1), (32, 1, 1), A.Ring())

    def user(self, cmd, rank: int, cand) -> A.Launch:
        """Bind a user kernel's arguments: tensors of this rank (or every rank's, `peers:`), scalars, literals."""
        g, mem = self.cycle.geometry, self.mem
        scalars = {"rows": g.phase(cmd.boundary.phase).rows, "hidden": g.hidden, "hc": g.hc,
                   "ranks": self.cycle.ranks, "rank": rank}
        literal = {"i32": C.c_int32, "u32": C.c_uint32, "i64": C.c_int64, "u64": C.c_uint64, "f32": C.c_float}
        values = []
        for arg in cand.args:
            if arg.kind in ("in", "param"):
                values.append(C.c_uint64(mem.addr(rank, cmd.inputs[arg.name])))
            elif arg.kind == "out":
                values.append(C.c_uint64(mem.addr(rank, cmd.outputs[arg.name])))
            elif arg.kind == "peers":
                values.append(C.c_uint64(mem.peer_table(cmd, arg.name)))
            elif arg.kind == "scalar":
                values.append(C.c_int32(scalars[arg.name]))
            else:
                values.append(literal[arg.kind](arg.value))
        return A.Launch(self.funcs[user_key(cand)], cand.grid, cand.block, *values, shared=cand.shared_bytes)

    def copy(self, cmd, rank: int) -> A.Launch:
        a = A.CopyArgs()
        outs = list(cmd.outputs.values())
        for c, bid in enumerate(outs):
            a.dst[c] = self.mem.addr(rank, bid)
            a.src[c] = self.mem.staged(rank, bid)
            a.nbytes[c] = self.cycle.buffers[bid].nbytes
        a.count = len(outs)
        return A.Launch(self.funcs["copy_kernel"], (64, 1, 1), (256, 1, 1), a)
