"""On-device check of the MoE draft kernels (drivers/cuda/moe.cu) and their figures, one command.

1. exactness: random cases (rows, hidden, experts, expert width, formats; values over many binades);
   every kernel's output against its numpy contract, counting mismatching elements per kernel:
   act_qdq (codes, scales), gate (ids, route weights), routed up (bf16 h) and down (fp32 slots) for
   packed MXFP4 and expanded bf16 weights, shared expert (FP8 packed, bf16 expanded), combine (fused
   COMBINE mode, fp32) and the exact-official epilogue (moe_combine_official, bf16); the expert
   linears with both kernels (warp: moe.cu, spread: moe_routed.cu), also alone on operands no gate
   makes (random codes with +-0 and all -0.0 groups, scales over 130 binades, ids repeated within rows
   and concentrated on three experts, so that one expert serves many slots over several passes);
   the grouped dense kernels of the draft's attention projections (FP8 packed, bf16 expanded; bf16 and
   fp32 outputs) on random shapes and on the six rank-local projections of seed section 4 at T = 5;
   both gate kernels (row: moe_gate, split: moe_gate_split_g<G>, the split one launched again without its
   arrival counts reset) in every case, and every split group size G on gates full of ties (experts with
   equal weight rows, equal biases, all-zero rows). Outputs start poisoned.
2. figures at the DeepSeek-V4.1 draft shape (hidden 5120, 128 experts, top-3, expert width 1152 per TP2
   rank): the routed-expert command (up -> act_qdq(h) -> down, SLOT mode) at T = 5, 10, 20, 32 as a CUDA
   graph, with the warp and the spread linear kernels, next to the HBM time of the expert bytes it must
   read (unique experts x bytes per expert, at the device-to-device copy bandwidth measured in the same
   run), and torch eager (per-expert loop, as the official model) and torch CUDA graph (gathered batched
   matmul) of the same MoE on expanded bf16 weights. CUDA events, warm-up, medians. The dense projections
   at T = 5, each next to the HBM time of its weight bytes. The gate alone at every T: the row kernel and
   the split kernel with 2, 4 and 8 experts a block.

    python tools/cuda_check_moe.py [--cases 40] [--reps 50] [--no-torch] [--json out.json]

Exit 0 when every compared element is exact, 1 otherwise, 3 without a CUDA device, 4 when a kernel
fails to build or run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from torch_baseline import event_ms, graph_of  # noqa: E402
from decoder_shell.contracts.act_qdq import QAct, act_qdq  # noqa: E402
from decoder_shell.contracts.dense import dense, dense_weights  # noqa: E402
from decoder_shell.contracts.expert import expert, swiglu  # noqa: E402
from decoder_shell.contracts.moe import ExpertWeights, combine_slots, official_epilogue, routed_slots  # noqa: E402
from decoder_shell.contracts.moe_gate import moe_gate  # noqa: E402
from decoder_shell.contracts.numerics import F32, to_bf16  # noqa: E402
from decoder_shell.contracts.qlinear import QWeight, expand, linear  # noqa: E402
from decoder_shell.drivers.cuda import api  # noqa: E402
from decoder_shell.drivers.cuda.moe import GATE_GROUPS, GATE_KERNELS, MoeDevice, gate_scratch_bytes  # noqa: E402
from decoder_shell.errors import ShellError  # noqa: E402
from decoder_shell.replay.compare import mismatches  # noqa: E402

U8, I32 = np.uint8, np.int32
KERNELS = ("warp", "spread")  # drivers/cuda/moe.LINEAR_KERNELS: both checked and timed in every run
#: The gate kernels checked on ties and timed: label -> (kernel, experts a block of the split one).
GATES = {"row": ("row", 0), **{f"split g{g}": ("split", g) for g in GATE_GROUPS}}


def rand_act(rng, t, k, spread=4.0):
    x = rng.standard_normal((t, k)) * np.exp2(rng.uniform(-spread, spread, (t, k // 32))).repeat(32, axis=1)
    x[rng.random((t, k)) < 0.03] = 0.0
    return to_bf16(x)


def rand_weights(rng, e, i, d):
    """Routed MXFP4 stacks (w13 [E,2,I,D/2], s13 [E,2,I,D/32], w2 [E,D,I/2], s2 [E,D,I/32]) and a shared
    FP8 expert (w13 [2,I,D], s13 [2,I/32,D/32], w2 [D,I], s2 [D/32,I/32])."""
    r = dict(w13=rng.integers(0, 256, (e, 2, i, d // 2), dtype=U8), s13=rng.integers(118, 122, (e, 2, i, d // 32), dtype=U8),
             w2=rng.integers(0, 256, (e, d, i // 2), dtype=U8), s2=rng.integers(118, 122, (e, d, i // 32), dtype=U8))
    c13 = rng.integers(0, 254, (2, i, d), dtype=U8)
    c2 = rng.integers(0, 254, (d, i), dtype=U8)
    sh = dict(w13=(c13 + (c13 >= 0x7F)).astype(U8), s13=rng.integers(110, 114, (2, i // 32, d // 32), dtype=U8),
              w2=(c2 + (c2 >= 0x7F)).astype(U8), s2=rng.integers(110, 114, (d // 32, i // 32), dtype=U8))
    return r, sh


def experts_of(r):
    return [ExpertWeights(QWeight("mxfp4", r["w13"][e, 0], r["s13"][e, 0]), QWeight("mxfp4", r["w13"][e, 1], r["s13"][e, 1]),
                          QWeight("mxfp4", r["w2"][e], r["s2"][e])) for e in range(r["w13"].shape[0])]


def shared_of(sh):
    return ExpertWeights(QWeight("fp8", sh["w13"][0], sh["s13"][0]), QWeight("fp8", sh["w13"][1], sh["s13"][1]),
                         QWeight("fp8", sh["w2"], sh["s2"]))


def expanded_stacks(r, sh):
    """The packed weights decoded once to bf16 (contracts.qlinear.expand), matrix by matrix on all cores."""
    from concurrent.futures import ThreadPoolExecutor
    e = r["w13"].shape[0]
    with ThreadPoolExecutor() as pool:
        ex13 = np.stack(list(pool.map(lambda j: np.stack([expand(QWeight("mxfp4", r["w13"][j, m], r["s13"][j, m]))
                                                          for m in range(2)]), range(e))))
        ex2 = np.stack(list(pool.map(lambda j: expand(QWeight("mxfp4", r["w2"][j], r["s2"][j])), range(e))))
    sh13 = np.stack([expand(QWeight("fp8", sh["w13"][m], sh["s13"][m])) for m in range(2)])
    return ex13, ex2, sh13, expand(QWeight("fp8", sh["w2"], sh["s2"]))


def upload_weights(dev, r, sh, gate_w, gate_b, expanded=None):
    """Device copies of the packed and expanded weights and the gate (uploaded once per weight set)."""
    up = dev.upload
    ex13, ex2, sh13, sh2 = expanded if expanded is not None else expanded_stacks(r, sh)
    return {"w": {n: up(v) for n, v in r.items()}, "sh": {n: up(v) for n, v in sh.items()},
            "xw": {"w13": up(ex13.view(np.uint16)), "w2": up(ex2.view(np.uint16)),
                   "sh13": up(sh13.view(np.uint16)), "sh2": up(sh2.view(np.uint16))},
            "gw": up(gate_w.view(np.uint16)), "gb": up(gate_b)}


class Moe:
    """One rank's MoE FFN on the device: buffers and the launch lists of its commands."""

    def __init__(self, dev: MoeDevice, t, d, e, i, k, weights):
        self.dev, self.t, self.d, self.e, self.i, self.k = dev, t, d, e, i, k
        self.x = dev.empty(t * d * 2)
        self.xc, self.xs = dev.empty(t * d), dev.empty(t * d // 32)
        self.gw, self.gb = weights["gw"], weights["gb"]
        self.ids, self.rw = dev.empty(t * k * 4), dev.empty(t * k * 4)
        gs = gate_scratch_bytes(t, e)  # the split gate's sums and arrival counts (zeroed once, as the arena)
        self.gs, self.gc = dev.empty(gs["scores"]), dev.empty(gs["count"])
        dev.cu.cuMemsetD8(self.gc, 0, gs["count"])
        self.w, self.sh, self.xw = weights["w"], weights["sh"], weights["xw"]
        s = t * k
        self.h, self.hc, self.hs = dev.empty(s * i * 2), dev.empty(s * i), dev.empty(s * i // 32)
        self.slots = dev.empty(s * d * 4)
        self.hsh, self.hshc, self.hshs = dev.empty(t * i * 2), dev.empty(t * i), dev.empty(t * i // 32)
        self.ysh, self.out = dev.empty(t * d * 4), dev.empty(t * d * 4)
        self.out_official = dev.empty(t * d * 2)

    def gate(self, kernel="row", group=0):
        """The gate launch; `group` experts a block of the split kernel (0: the one the driver runs)."""
        kw = {"group": group} if group else {}
        return [self.dev.gate(self.x, self.gw, self.gb, self.ids, self.rw, self.t, self.d, self.e, self.k,
                              kernel=kernel, scores=self.gs, count=self.gc, **kw)]

    def front(self, gate="row"):
        dev, t, d = self.dev, self.t, self.d
        return [dev.qdq(self.x, self.xc, self.xs, t, d), *self.gate(gate)]

    def routed(self, fmt="mxfp4", kernel="warp"):
        dev, t, d, e, i, k = self.dev, self.t, self.d, self.e, self.i, self.k
        w13, s13 = (self.w["w13"], self.w["s13"]) if fmt == "mxfp4" else (self.xw["w13"], 0)
        w2, s2 = (self.w["w2"], self.w["s2"]) if fmt == "mxfp4" else (self.xw["w2"], 0)
        return [dev.linear("up", fmt, xc=self.xc, xs=self.xs, ids=self.ids, rw=self.rw, rows=t, topk=k, act_per_slot=False,
                           w=w13, s=s13, experts=e, mats=2, n=i, k=d, out=self.h, kernel=kernel),
                dev.qdq(self.h, self.hc, self.hs, t * k, i),
                dev.linear("down", fmt, xc=self.hc, xs=self.hs, ids=self.ids, rw=0, rows=t, topk=k, act_per_slot=True,
                           w=w2, s=s2, experts=e, mats=1, n=d, k=i, out=self.slots, kernel=kernel)]

    def shared(self, fmt="fp8", kernel="warp"):
        dev, t, d, i = self.dev, self.t, self.d, self.i
        w13, s13 = (self.sh["w13"], self.sh["s13"]) if fmt == "fp8" else (self.xw["sh13"], 0)
        w2, s2 = (self.sh["w2"], self.sh["s2"]) if fmt == "fp8" else (self.xw["sh2"], 0)
        return [dev.linear("up", fmt, xc=self.xc, xs=self.xs, ids=0, rw=0, rows=t, topk=1, act_per_slot=False,
                           w=w13, s=s13, experts=1, mats=2, n=i, k=d, out=self.hsh, kernel=kernel),
                dev.qdq(self.hsh, self.hshc, self.hshs, t, i),
                dev.linear("down", fmt, xc=self.hshc, xs=self.hshs, ids=0, rw=0, rows=t, topk=1, act_per_slot=True,
                           w=w2, s=s2, experts=1, mats=1, n=d, k=i, out=self.ysh, kernel=kernel)]

    def combine(self):
        return [self.dev.combine(self.slots, self.ysh, self.ids, self.out, self.t, self.k, self.d)]

    def combine_official(self):
        """The exact-official epilogue on one rank's slots and shared output (= their all-reduced sums)."""
        return [self.dev.combine_official(self.slots, self.ysh, self.ids, self.out_official, self.t, self.k, self.d)]


def check_case(dev, cu, stream, rng, t, d, e, i, counts, weights=None):
    k = min(3, e)
    if weights is None:
        r, sh = rand_weights(rng, e, i, d)
        gw = to_bf16(rng.standard_normal((e, d)) / np.sqrt(d))
        gb = (rng.standard_normal(e) * 0.1).astype(F32)
        dw = upload_weights(dev, r, sh, gw, gb)
    else:
        r, sh, gw, gb, dw = weights
    x = rand_act(rng, t, d, 2.0)
    want = expected(x, r, sh, gw, gb, k)
    m = Moe(dev, t, d, e, i, k, dw)
    cu.cuMemcpyHtoD(m.x, x.view(np.uint16).ctypes.data, x.nbytes)
    # the gate kernels take turns: each runs twice (the split gate's counts not reset in between)
    for j, ((fmt_r, fmt_s), kern) in enumerate(itertools.product((("mxfp4", "fp8"), ("bf16", "bf16")), KERNELS)):
        gate = GATE_KERNELS[j % len(GATE_KERNELS)]
        for p, n in ((m.h, t * k * i * 2), (m.slots, t * k * d * 4), (m.ysh, t * d * 4), (m.out, t * d * 4),
                     (m.out_official, t * d * 2), (m.ids, t * k * 4), (m.rw, t * k * 4)):
            cu.cuMemsetD8Async(p, 0xFF, n, stream)  # poison: an output a kernel leaves unwritten differs
        dev.launch(m.front(gate) + m.routed(fmt_r, kern) + m.shared(fmt_s, kern) + m.combine() + m.combine_official(),
                   stream)
        cu.cuStreamSynchronize(stream)
        got = {
            "act_qdq codes": dev.download(m.xc, (t, d), U8), "act_qdq scales": dev.download(m.xs, (t, d // 32), U8),
            f"gate ids ({gate})": dev.download(m.ids, (t, k), I32),
            f"gate weights ({gate})": dev.download(m.rw, (t, k), F32),
            f"routed up h ({fmt_r}, {kern})": dev.download(m.h, (t * k, i), np.uint16),
            f"routed down slots ({fmt_r}, {kern})": dev.download(m.slots, (t, k, d), F32),
            f"shared expert ({fmt_s}, {kern})": dev.download(m.ysh, (t, d), F32),
            "combine": dev.download(m.out, (t, d), F32),
            "combine official": dev.download(m.out_official, (t, d), np.uint16),
        }
        for name, g in got.items():
            w = want[name.split(" (")[0]]
            c = counts.setdefault(name, [0, 0])
            c[0] += int(g.size)
            c[1] += mismatches(g, w)
    check_official_ties(dev, cu, stream, rng, m, counts)
    return m


def tie_gate(rng, t, d, e):
    """A gate full of ties: experts in pairs (and a trailing triple) with equal weight rows, biases from
    two values, and row 0 of x all zero (every score softplus(0), the biased ties decided by id)."""
    gw = to_bf16(rng.standard_normal((e, d)) / np.sqrt(d))
    src = np.arange(e) // 2 * 2
    gw = gw[src]
    gb = rng.choice(np.array([0.0, 0.125], F32), e).astype(F32)
    x = rand_act(rng, t, d, 2.0)
    x[0] = 0
    return x, gw, gb


def check_gate_ties(dev, cu, stream, rng, t, d, e, counts, reps=2):
    """Every gate kernel (GATES) on tie_gate operands against contracts.moe_gate (ids and weights), each
    run `reps` times on the same scratch (the split gate's counts only grow)."""
    k = min(3, e)
    x, gw, gb = tie_gate(rng, t, d, e)
    ids, rw = moe_gate(x, gw, gb, k)
    m = Moe(dev, t, d, e, 64, k, {"gw": dev.upload(gw.view(np.uint16)), "gb": dev.upload(gb), "w": {}, "sh": {},
                                  "xw": {}})
    cu.cuMemcpyHtoD(m.x, x.view(np.uint16).ctypes.data, x.nbytes)
    for gate, (kernel, group) in GATES.items():
        for _ in range(reps):
            cu.cuMemsetD8Async(m.ids, 0xFF, t * k * 4, stream)
            cu.cuMemsetD8Async(m.rw, 0xFF, t * k * 4, stream)
            dev.launch(m.gate(kernel, group), stream)
            cu.cuStreamSynchronize(stream)
            for name, got, want in ((f"gate ids ({gate}, ties)", dev.download(m.ids, (t, k), I32), ids.astype(I32)),
                                    (f"gate weights ({gate}, ties)", dev.download(m.rw, (t, k), F32), rw)):
                c = counts.setdefault(name, [0, 0])
                c[0] += int(got.size)
                c[1] += mismatches(got, want)


def rand_codes(rng, rows, k):
    """act_qdq-shaped operands without a gate: E4M3 codes (no NaN; a tenth +-0, some whole groups -0.0,
    so group sums of -0.0 products occur) and E8M0 scales over many binades (exponents -67..63)."""
    c = rng.integers(0, 254, (rows, k), dtype=U8)
    c = (c + (c >= 0x7F)).astype(U8)
    zero = rng.random((rows, k)) < 0.1
    c[zero] = rng.choice(np.array([0x00, 0x80], U8), int(zero.sum()))
    c.reshape(rows, k // 32, 32)[rng.random((rows, k // 32)) < 0.05] = 0x80
    return c, rng.integers(60, 191, (rows, k // 32), dtype=U8)


def check_linears(dev, cu, stream, rng, t, d, e, i, counts, weights, concentrate):
    """The expert linears alone (both kernels, packed and expanded weights) on operands no gate makes:
    ids drawn with repeats (concentrate: all T x 3 slots on experts 0..2, so one expert serves many slots
    over several passes, ids repeated within a row too), random codes and scales, each against the
    contract per expert: up -> bf16 h, down -> fp32 slots; the shared expert's (dense) linears likewise."""
    r, sh, expanded, dw = weights
    k = min(3, e)
    m = Moe(dev, t, d, e, i, k, dw)
    ids = rng.integers(0, min(e, 3) if concentrate else e, (t, k)).astype(I32)
    rw = rng.uniform(-2.0, 2.0, (t, k)).astype(F32)
    xc, xs = rand_codes(rng, t, d)
    hc, hs = rand_codes(rng, t * k, i)
    shc, shs = rand_codes(rng, t, i)
    for ptr, v in ((m.xc, xc), (m.xs, xs), (m.ids, ids), (m.rw, rw), (m.hc, hc), (m.hs, hs), (m.hshc, shc),
                   (m.hshs, shs)):
        cu.cuMemcpyHtoD(ptr, np.ascontiguousarray(v).ctypes.data, v.nbytes)
    ex13, ex2, sh13, sh2 = expanded
    packed, shp = experts_of(r), shared_of(sh)
    flat, frw = ids.reshape(-1), rw.reshape(-1)
    for fmt in ("packed", "expanded"):
        w1 = (lambda j: packed[j].w1) if fmt == "packed" else (lambda j: ex13[j, 0])
        w3 = (lambda j: packed[j].w3) if fmt == "packed" else (lambda j: ex13[j, 1])
        w2 = (lambda j: packed[j].w2) if fmt == "packed" else (lambda j: ex2[j])
        want_h, want_y = np.zeros((t * k, i), np.uint16), np.zeros((t * k, d), F32)
        for j in np.unique(flat):
            sl = np.nonzero(flat == j)[0]
            sub = QAct(xc[sl // k], xs[sl // k])
            want_h[sl] = to_bf16(swiglu(linear(sub, w1(j)), linear(sub, w3(j)), frw[sl])).view(np.uint16)
            want_y[sl] = linear(QAct(hc[sl], hs[sl]), w2(j), "float32")
        xq, hq = QAct(xc, xs), QAct(shc, shs)
        s1, s3, s2 = (shp.w1, shp.w3, shp.w2) if fmt == "packed" else (sh13[0], sh13[1], sh2)
        want_sh_h = to_bf16(swiglu(linear(xq, s1), linear(xq, s3))).view(np.uint16)
        want_sh_y = linear(hq, s2, "float32")
        fr, fs = ("mxfp4", "fp8") if fmt == "packed" else ("bf16", "bf16")
        for kern in KERNELS:
            up, _, down = m.routed(fr, kern)
            sup, _, sdown = m.shared(fs, kern)
            for p, n in ((m.h, t * k * i * 2), (m.slots, t * k * d * 4), (m.hsh, t * i * 2), (m.ysh, t * d * 4)):
                cu.cuMemsetD8Async(p, 0xFF, n, stream)
            dev.launch([up, down, sup, sdown], stream)
            cu.cuStreamSynchronize(stream)
            tag = f"{fr}, {kern}, {'concentrated' if concentrate else 'random'} ids"
            for name, got, want in ((f"linear up h ({tag})", dev.download(m.h, (t * k, i), np.uint16), want_h),
                                    (f"linear down slots ({tag})", dev.download(m.slots, (t * k, d), F32), want_y),
                                    (f"shared linear up h ({fs}, {kern})", dev.download(m.hsh, (t, i), np.uint16),
                                     want_sh_h),
                                    (f"shared linear down ({fs}, {kern})", dev.download(m.ysh, (t, d), F32),
                                     want_sh_y)):
                c = counts.setdefault(name, [0, 0])
                c[0] += int(got.size)
                c[1] += mismatches(got, want)


def check_official_ties(dev, cu, stream, rng, m, counts):
    """moe_combine_official on sums over many binades with a third of them exactly halfway between two
    bf16 values (round-to-nearest-even decides), against contracts.moe.official_epilogue."""
    t, k, d = m.t, m.k, m.d
    ids = np.stack([rng.permutation(m.e)[:k] for _ in range(t)]).astype(I32)
    slots = (rng.standard_normal((t, k, d)) * np.exp2(rng.integers(-20, 20, (t, k, d)))).astype(F32)
    ties = rng.random((t, k, d)) < 0.3
    slots[ties] = (to_bf16(slots[ties]).astype(F32).view(np.uint32) | 0x8000).view(F32)
    shared = (rng.standard_normal((t, d)) * 4).astype(F32)
    for ptr, a in ((m.slots, slots), (m.ysh, shared), (m.ids, ids)):
        cu.cuMemcpyHtoD(ptr, a.ctypes.data, a.nbytes)
    dev.launch(m.combine_official(), stream)
    cu.cuStreamSynchronize(stream)
    got = dev.download(m.out_official, (t, d), np.uint16)
    c = counts.setdefault("combine official (bf16 ties)", [0, 0])
    c[0] += int(got.size)
    c[1] += mismatches(got, official_epilogue(slots, shared, ids).view(np.uint16))


#: The draft attention's dense projections per TP2 rank (seed section 4): name -> (groups, N, K, out).
DENSE_SHAPES = {"wq_a": (1, 1280, 5120, "bfloat16"), "wkv": (1, 512, 5120, "bfloat16"),
                "wq_b": (1, 16384, 1280, "bfloat16"), "wo_a": (4, 1024, 4096, "bfloat16"),
                "wo_b": (1, 5120, 4096, "float32"), "main_proj": (1, 5120, 15360, "bfloat16")}


def rand_dense(rng, groups, n, k):
    """FP8 codes [groups, n, k] (no NaN code) and 32x32 E8M0 scales [groups, n/32, k/32]."""
    c = rng.integers(0, 254, (groups, n, k), dtype=U8)
    c = (c + (c >= 0x7F)).astype(U8)
    return c, rng.integers(116, 124, (groups, n // 32, k // 32), dtype=U8)


def check_dense_case(dev, cu, stream, rng, t, groups, n, k, counts, outs=("bfloat16", "float32"), time_reps=0):
    """The grouped dense kernels (packed FP8 and expanded bf16 weights, each output dtype) against
    contracts/dense on random operands; with time_reps, the graph time of each (fp8, bf16) in ms."""
    codes, scales = rand_dense(rng, groups, n, k)
    a = act_qdq(rand_act(rng, t, groups * k, 2.0))
    ws = dense_weights(codes, scales)
    want32 = dense(a, ws, "float32")
    wexp = np.stack([expand(w) for w in ws])
    xc, xs = dev.upload(a.codes), dev.upload(a.scales)
    wc, wsc, we = dev.upload(codes), dev.upload(scales), dev.upload(wexp.view(np.uint16))
    times = {}
    for out in outs:
        want = want32 if out == "float32" else dense(a, ws, "bfloat16")
        y = dev.empty(want.nbytes)
        for fmt, w, s in (("fp8", wc, wsc), ("bf16", we, 0)):
            ln = [dev.dense(fmt, out, xc=xc, xs=xs, w=w, s=s, rows=t, groups=groups, n=n, k=k, out=y)]
            cu.cuMemsetD8(y, 0xFF, want.nbytes)
            dev.launch(ln, stream)
            cu.cuStreamSynchronize(stream)
            got = dev.download(y, want.shape, want.dtype)
            c = counts.setdefault(f"dense {out} ({fmt})", [0, 0])
            c[0] += int(got.size)
            c[1] += mismatches(got, want)
            if time_reps:
                times[fmt] = graph_time(cu, stream, dev, ln, time_reps)
    return times


def expected(x, r, sh, gw, gb, k):
    """Every compared output, from the numpy contracts."""
    t, i = x.shape[0], r["w13"].shape[2]
    xq = act_qdq(x)
    ids, rw = moe_gate(x, gw, gb, k)
    ex, shw = experts_of(r), shared_of(sh)
    want_slots = routed_slots(xq, ids, rw, ex)
    want_sh = expert(xq, shw.w1, shw.w3, shw.w2, None, "float32")
    want_h = np.zeros((t * k, i), F32)
    for sl in range(t * k):
        row, ew = sl // k, ex[int(ids.reshape(-1)[sl])]
        sub = QAct(xq.codes[row:row + 1], xq.scales[row:row + 1])
        want_h[sl] = swiglu(linear(sub, ew.w1), linear(sub, ew.w3), rw.reshape(-1)[sl:sl + 1])[0]
    want_h = to_bf16(want_h)
    return {"act_qdq codes": xq.codes, "act_qdq scales": xq.scales, "gate ids": ids.astype(I32), "gate weights": rw,
            "routed up h": want_h.view(np.uint16), "routed down slots": want_slots, "shared expert": want_sh,
            "combine": combine_slots(want_slots, ids, want_sh),
            "combine official": official_epilogue(want_slots, want_sh, ids).view(np.uint16)}


def graph_time(cu, stream, dev, launches, reps):
    cu.cuStreamBeginCapture(stream, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    dev.launch(launches, stream)
    graph = cu.cuStreamEndCapture(stream)
    exe = cu.cuGraphInstantiate(graph, 0)
    a, b = cu.cuEventCreate(0), cu.cuEventCreate(0)
    times = []
    for rep in range(reps + 5):
        cu.cuEventRecord(a, stream)
        cu.cuGraphLaunch(exe, stream)
        cu.cuEventRecord(b, stream)
        cu.cuStreamSynchronize(stream)
        if rep >= 5:
            times.append(float(cu.cuEventElapsedTime(a, b)))
    return statistics.median(times)


def copy_bandwidth(cu, stream, dev, nbytes=2 << 30):
    src, dst = dev.empty(nbytes), dev.empty(nbytes)
    a, b = cu.cuEventCreate(0), cu.cuEventCreate(0)
    ts = []
    for _ in range(8):
        cu.cuEventRecord(a, stream)
        cu.cuMemcpyDtoDAsync(dst, src, nbytes, stream)
        cu.cuEventRecord(b, stream)
        cu.cuStreamSynchronize(stream)
        ts.append(float(cu.cuEventElapsedTime(a, b)))
    cu.cuMemFree(src), cu.cuMemFree(dst)
    dev.allocs.remove(src), dev.allocs.remove(dst)
    return 2 * nbytes / (statistics.median(ts) * 1e-3)  # bytes read + written per second


def torch_times(t, d, e, i, k, x, ex13, ex2, ids, rw, reps):
    """The same routed MoE in torch on expanded bf16 weights: eager as the official model (host-side
    loop over the experts present), CUDA graph as a gathered batched matmul (no host sync)."""
    import torch
    torch.cuda.empty_cache()  # the previous row's weights
    dev = torch.device("cuda")
    bf = torch.bfloat16
    W13 = torch.from_numpy(ex13.view(np.int16)).view(bf).to(dev)
    W2 = torch.from_numpy(ex2.view(np.int16)).view(bf).to(dev)
    X = torch.from_numpy(x.view(np.int16)).view(bf).to(dev)
    IDS = torch.from_numpy(ids.astype(np.int64)).to(dev)
    RW = torch.from_numpy(rw).to(dev)

    def qdq(v):
        g = v.float().reshape(v.shape[0], -1, 32)
        s = torch.exp2(torch.ceil(torch.log2(g.abs().amax(-1, keepdim=True).clamp(min=1e-4) / 448)))
        return ((g / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s).reshape(v.shape).to(bf)

    def eager():
        xq = qdq(X)
        y = torch.zeros(t, k, d, dtype=torch.float32, device=dev)
        for ex in torch.unique(IDS).tolist():
            rows, slots = torch.nonzero(IDS == ex, as_tuple=True)
            xr = xq[rows]
            g = (xr @ W13[ex, 0].T).float().clamp(max=10)
            u = (xr @ W13[ex, 1].T).float().clamp(-10, 10)
            h = (torch.nn.functional.silu(g) * u * RW[rows, slots, None]).to(bf)
            y[rows, slots] = torch.matmul(qdq(h), W2[ex].T).float()
        return y

    def gathered():
        xq = qdq(X)
        sel = IDS.reshape(-1)
        xr = xq.repeat_interleave(k, 0)[:, None, :]
        g = torch.bmm(xr, W13[sel, 0].transpose(1, 2)).float().clamp(max=10)
        u = torch.bmm(xr, W13[sel, 1].transpose(1, 2)).float().clamp(-10, 10)
        h = (torch.nn.functional.silu(g) * u * RW.reshape(-1, 1, 1)).to(bf)
        return torch.bmm(qdq(h.reshape(t * k, i)).reshape(t * k, 1, i), W2[sel].transpose(1, 2)).float()

    for _ in range(3):
        eager(), gathered()
    torch.cuda.synchronize()
    te = statistics.median(event_ms(eager) for _ in range(max(5, reps // 5)))
    graph = graph_of(gathered)
    tg = statistics.median(event_ms(graph.replay) for _ in range(reps))
    return te, tg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rows", type=int, nargs="*", default=[5, 10, 20, 32])
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    try:
        raw = api.load()
    except ShellError as e:
        print(e, file=sys.stderr)
        return e.exit_code
    cu = api.Checked(raw)
    device = cu.cuDeviceGet(0)
    attr = raw.CUdevice_attribute
    arch = "sm_{}{}".format(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
                            cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device))
    name = cu.cuDeviceGetName(128, device)
    gpu = (name.decode() if isinstance(name, bytes) else str(name)).split("\x00")[0].strip()
    cu.cuCtxSetCurrent(cu.cuDevicePrimaryCtxRetain(device))
    stream = cu.cuStreamCreate(1)
    dev = MoeDevice(cu, arch)
    rng = np.random.default_rng(args.seed)
    t0 = time.time()

    counts: dict[str, list[int]] = {}
    shapes = [(1, 64, 1, 64), (3, 128, 4, 64), (5, 256, 8, 128), (32, 64, 128, 64), (10, 1024, 16, 256)]
    for c in range(args.cases):
        t, d, e, i = shapes[c] if c < len(shapes) else (
            int(rng.integers(1, 33)), 32 * int(rng.integers(1, 33)), int(rng.choice([1, 3, 8, 32, 128])),
            64 * int(rng.integers(1, 9)))
        r, sh = rand_weights(rng, e, i, d)
        gw = to_bf16(rng.standard_normal((e, d)) / np.sqrt(d))
        gb = (rng.standard_normal(e) * 0.1).astype(F32)
        ex = expanded_stacks(r, sh)
        dw = upload_weights(dev, r, sh, gw, gb, ex)
        check_case(dev, cu, stream, rng, t, d, e, i, counts, (r, sh, gw, gb, dw))
        check_linears(dev, cu, stream, rng, t, d, e, i, counts, (r, sh, ex, dw), concentrate=c % 2 == 1)
        check_gate_ties(dev, cu, stream, rng, t, d, e, counts)
        dev.reset()
        check_dense_case(dev, cu, stream, rng, int(rng.integers(1, 33)), int(rng.choice([1, 2, 4])),
                         32 * int(rng.integers(1, 17)), 32 * int(rng.integers(1, 65)), counts)
        dev.reset()
    dense_figures = []
    for name, (groups, n, k, out) in DENSE_SHAPES.items():  # the draft's own shapes, T = 5, timed
        ms = check_dense_case(dev, cu, stream, rng, 5, groups, n, k, counts, (out,), args.reps)
        dense_figures.append({"projection": name, "groups x N x K": f"{groups} x {n} x {k}", "out": out,
                              "fp8 ms": ms["fp8"], "bf16 ms": ms["bf16"]})
        dev.reset()
    d, e, i, k = 5120, 128, 1152, 3
    r, sh = rand_weights(rng, e, i, d)
    gw = to_bf16(rng.standard_normal((e, d)) / np.sqrt(d))
    gb = (rng.standard_normal(e) * 0.1).astype(F32)
    expanded = expanded_stacks(r, sh)
    dw = upload_weights(dev, r, sh, gw, gb, expanded)
    check_case(dev, cu, stream, rng, 5, d, e, i, counts, (r, sh, gw, gb, dw))  # the draft's own shape
    for t in (5, 20, 32):
        check_gate_ties(dev, cu, stream, rng, t, d, e, counts)
    for t, conc in ((10, False), (12, True)):  # 30 slots on ~28 experts; 36 slots on 3 experts (several passes)
        check_linears(dev, cu, stream, rng, t, d, e, i, counts, (r, sh, expanded, dw), concentrate=conc)
    bad = sum(c[1] for c in counts.values())

    bw = copy_bandwidth(cu, stream, dev)
    per_expert = {"mxfp4": 2 * 1152 * 2560 + 2 * 1152 * 160 + 5120 * 576 + 5120 * 36, "bf16": 3 * 1152 * 5120 * 2}
    figures = []
    for t in args.rows:
        m = Moe(dev, t, d, e, i, k, dw)
        x = rand_act(rng, t, d, 1.0)
        cu.cuMemcpyHtoD(m.x, x.view(np.uint16).ctypes.data, x.nbytes)
        dev.launch(m.front(), stream)
        cu.cuStreamSynchronize(stream)
        ids = dev.download(m.ids, (t, k), I32)
        rw = dev.download(m.rw, (t, k), F32)
        uniq = len(np.unique(ids))
        row = {"T": t, "unique experts": uniq}
        for fmt in ("mxfp4", "bf16"):  # the two linear kernels timed back to back, same buffers
            hbm = uniq * per_expert[fmt] / bw * 1e3
            row[f"{fmt} HBM ms"] = hbm
            for kern in KERNELS:
                launches = m.routed(fmt, kern)
                ms = graph_time(cu, stream, dev, launches, args.reps)
                row[f"{fmt} {kern} ms"], row[f"{fmt} {kern} / HBM"] = ms, ms / hbm
                if fmt == "mxfp4":  # where the time goes: each of the three launches alone
                    for part, ln in zip(("up", "qdq", "down"), launches):
                        row[f"{fmt} {kern} {part} ms"] = graph_time(cu, stream, dev, [ln], args.reps)
        for kern in KERNELS:
            row[f"shared fp8 {kern} ms"] = graph_time(cu, stream, dev, m.shared("fp8", kern), args.reps)
        row["front (qdq+gate) ms"] = graph_time(cu, stream, dev, m.front(), args.reps)
        for gate, (kernel, group) in GATES.items():  # the gate alone, back to back on the same buffers
            row[f"gate {gate} ms"] = graph_time(cu, stream, dev, m.gate(kernel, group), args.reps)
        if not args.no_torch:
            try:
                row["torch eager ms"], row["torch graph ms"] = torch_times(t, d, e, i, k, x, expanded[0], expanded[1],
                                                                           ids, rw, args.reps)
            except ImportError as err:
                row["torch eager ms"] = row["torch graph ms"] = f"no torch ({err})"
        figures.append(row)

    out = {"gpu": gpu, "arch": arch, "seconds": round(time.time() - t0, 1), "copy_bandwidth_GBps": bw / 1e9,
           "exactness": {n: {"elements": c[0], "mismatching": c[1]} for n, c in counts.items()},
           "mismatching_elements": bad, "figures": figures, "cases": args.cases + 1}
    out["dense_figures"] = [dict(f, **{"fp8 HBM ms": _hbm(f, bw, 1), "bf16 HBM ms": _hbm(f, bw, 2)})
                            for f in dense_figures]
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    print(f"{gpu} ({arch}), {args.cases + 1} cases, {out['seconds']} s; D2D copy bandwidth {bw / 1e9:.0f} GB/s")
    print("| kernel output | elements | mismatching |\n|---|---|---|")
    for n, c in counts.items():
        print(f"| {n} | {c[0]} | {c[1]} |")
    cols = list(figures[0]) if figures else []
    print("\nrouted-expert command, one TP2 rank (D 5120, 128 experts, top-3, width 1152), CUDA graph medians")
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for row in figures:
        print("| " + " | ".join(f"{row[c]:.4f}" if isinstance(row[c], float) else str(row[c]) for c in cols) + " |")
    print("\nthe gate alone, one rank (D 5120, 128 experts, top-3), CUDA graph medians")
    print("| T | " + " | ".join(f"{g} ms" for g in GATES) + " | best split vs row |\n|" + "---|" * (len(GATES) + 2))
    for row in figures:
        split = min(row[f"gate {g} ms"] for g in GATES if g != "row")
        print(f"| {row['T']} | " + " | ".join(f"{row[f'gate {g} ms']:.4f}" for g in GATES) +
              f" | {row['gate row ms'] / split:.2f}x |")
    print("\ndense projections, one TP2 rank, T = 5, CUDA graph medians (HBM: weight bytes at the copy bandwidth)")
    cols = list(out["dense_figures"][0])
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for row in out["dense_figures"]:
        print("| " + " | ".join(f"{row[c]:.4f}" if isinstance(row[c], float) else str(row[c]) for c in cols) + " |")
    return 0 if bad == 0 else 1


def _hbm(f, bw, width):
    """ms to read a projection's weights once: FP8 codes + 32x32 scales (width 1) or bf16 (width 2)."""
    g, n, k = (int(v) for v in f["groups x N x K"].split(" x "))
    nbytes = g * n * k * width + (g * n * k // 1024 if width == 1 else 0)
    return nbytes / bw * 1e3


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ShellError as err:  # a build or driver error: one line and its exit code
        print(f"cuda_check_moe: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
