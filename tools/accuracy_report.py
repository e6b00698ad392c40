#!/usr/bin/env python3
"""Accuracy of the mHC contracts against public implementations (a tolerance measurement: the
contracts define exact bits; here we measure how far those bits are from other orders of the same math).

References, each evaluated per boundary on the same inputs as the contract (no chaining of errors):
- float64: the official DeepSeek-V4 `inference/model.py` formulas (hc_pre, hc_post, hc_head,
  hc_split_sinkhorn) written in torch and run in float64: the "true" value;
- official fp32: the same formulas in float32, as the official reference runs them;
- transformers: `DeepseekV4HyperConnection` / `DeepseekV4HyperHead` (transformers 5.23) with our
  parameters, bf16 streams in, and the hc_post expression of `DeepseekV4DecoderLayer.forward`
  (post and comb cast to bf16, bf16 matmul).

Usage: PYTHONPATH=. python tools/accuracy_report.py [--seeds 16] [--hidden 4096] [--rows 2]
"""

from __future__ import annotations

import argparse
import platform
import time

import ml_dtypes
import numpy as np
import torch

from decoder_shell.contracts import mhc as C
from decoder_shell.contracts.numerics import BF16
from official import EPS, HC, ITERS, official_head, official_post, official_pre, rel, significant, ulp

# --- transformers ------------------------------------------------------------------------------
class Transformers:
    def __init__(self, hidden: int):
        from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config
        from transformers.models.deepseek_v4.modeling_deepseek_v4 import (DeepseekV4HyperConnection,
                                                                           DeepseekV4HyperHead)
        cfg = DeepseekV4Config(hidden_size=hidden, hc_mult=HC, hc_sinkhorn_iters=ITERS, hc_eps=EPS, rms_norm_eps=EPS)
        self.hc = DeepseekV4HyperConnection(cfg).eval()
        self.head = DeepseekV4HyperHead(cfg).eval()

    @torch.no_grad()
    def pre(self, streams, fn, base, scale):
        self.hc.fn.copy_(fn)
        self.hc.base.copy_(base)
        self.hc.scale.copy_(scale)
        post, comb, y = self.hc(streams.unsqueeze(0))  # [1, M, HC, D]: batch 1, M rows as the sequence
        return y[0], post[0], comb[0]

    @torch.no_grad()
    def post(self, x, residual, post, comb):
        dtype = residual.dtype  # DeepseekV4DecoderLayer.forward, hc_post part
        return post.to(dtype).unsqueeze(-1) * x.unsqueeze(-2) + torch.matmul(comb.to(dtype).transpose(-1, -2), residual)

    @torch.no_grad()
    def head_collapse(self, streams, fn, base, scale):
        self.head.hc_fn.copy_(fn)
        self.head.hc_base.copy_(base)
        self.head.hc_scale.copy_(scale)
        return self.head(streams.unsqueeze(0))[0]


# --- metrics -----------------------------------------------------------------------------------
def to_torch(a: np.ndarray) -> torch.Tensor:
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def to_numpy(t: torch.Tensor, like: np.ndarray) -> np.ndarray:
    """A torch result, rounded (round to nearest even) to the dtype of our output."""
    t = t.detach()
    if like.dtype == BF16:
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(BF16)
        return t.to(torch.float64).numpy().astype(BF16)
    return t.to(torch.float64).numpy().astype(np.float32) if t.dtype != torch.float32 else t.numpy()


def max_ulp(a: np.ndarray, b: np.ndarray, exact: np.ndarray) -> int:
    m = significant(exact)
    return int(ulp(a, b)[m].max()) if m.any() else 0


class Stat:
    """Running maxima for one output: ours, the official fp32 formula and transformers, each
    against float64, and ours against each of the two."""

    COLS = ("ours vs float64: max ulp", "max rel. error", "official fp32 vs float64: max ulp", "max rel. error",
            "transformers vs float64: max ulp", "max rel. error", "ours vs official fp32: max ulp", "differing",
            "ours vs transformers: max ulp", "differing")

    def __init__(self):
        self.v = dict.fromkeys(("u_o", "r_o", "u_32", "r_32", "u_t", "r_t", "u_o32", "u_ot"), 0)
        self.d_o32 = self.d_ot = self.n = 0

    def add(self, ours: np.ndarray, ref64: torch.Tensor, ref32: torch.Tensor, reft: torch.Tensor):
        exact = ref64.double().numpy()
        r64, r32, rt = to_numpy(ref64, ours), to_numpy(ref32, ours), to_numpy(reft, ours)
        upd = {"u_o": max_ulp(ours, r64, exact), "r_o": rel(ours, exact), "u_32": max_ulp(r32, r64, exact),
               "r_32": rel(r32, exact), "u_t": max_ulp(rt, r64, exact), "r_t": rel(rt, exact),
               "u_o32": max_ulp(ours, r32, exact), "u_ot": max_ulp(ours, rt, exact)}
        for k, x in upd.items():
            self.v[k] = max(self.v[k], x)
        self.d_o32 += int(np.count_nonzero(ulp(ours, r32)))
        self.d_ot += int(np.count_nonzero(ulp(ours, rt)))
        self.n += ours.size

    def cells(self) -> list[str]:
        v, n = self.v, max(self.n, 1)
        return [str(int(v["u_o"])), f"{v['r_o']:.1e}", str(int(v["u_32"])), f"{v['r_32']:.1e}",
                str(int(v["u_t"])), f"{v['r_t']:.1e}", str(int(v["u_o32"])), f"{100 * self.d_o32 / n:.3g}%",
                str(int(v["u_ot"])), f"{100 * self.d_ot / n:.3g}%"]


# --- one random cycle slice --------------------------------------------------------------------
def params(rng, hidden: int, head: bool = False):
    o = HC if head else (2 + HC) * HC
    fn = (rng.standard_normal((o, HC * hidden), dtype=np.float32) / np.float32(np.sqrt(HC * hidden)))
    base = rng.standard_normal(o, dtype=np.float32) * np.float32(0.5)
    scale = rng.uniform(0.25, 1.5, 1 if head else 3).astype(np.float32)
    return fn, base, scale


def measure(seeds: int, hidden: int, rows: int, stats: dict, tf: Transformers):
    def stat(key):
        return stats.setdefault(key, Stat())

    for seed in range(seeds):
        rng = np.random.default_rng([2026, seed, hidden, rows])
        x0 = rng.standard_normal((rows, hidden), dtype=np.float32).astype(BF16)
        p0, p1, ph = params(rng, hidden), params(rng, hidden), params(rng, hidden, head=True)
        x1 = rng.standard_normal((rows, hidden), dtype=np.float32).astype(BF16)
        x2 = rng.standard_normal((rows, hidden), dtype=np.float32).astype(BF16)

        first = C.mhc_pre(x0, *p0)
        mid = C.mhc_post_pre(x1, first["streams"], first["post"], first["comb"], *p1)
        last = C.mhc_post_head(x2, mid["streams"], mid["post"], mid["comb"], *ph)

        # hc_pre parts (mhc_pre and mhc_post_pre): each against references fed our input streams
        for op, out, pp in (("mhc_pre", first, p0), ("mhc_post_pre", mid, p1)):
            s = to_torch(out["streams"])
            tp = [to_torch(a) for a in pp]
            y64, post64, comb64 = official_pre(s, *tp, torch.float64)
            y32, post32, comb32 = official_pre(s, *tp, torch.float32)
            yt, postt, combt = tf.pre(s, *tp)
            for name, ours, r64, r32, rt in (("y", out["y"], y64, y32, yt),
                                             ("post", out["post"], post64, post32, postt),
                                             ("comb", out["comb"], comb64, comb32, combt)):
                stat((op, name)).add(ours, r64, r32, rt)

        # hc_post parts (mhc_post_pre and mhc_post_head streams)
        for op, x, prev, out in (("mhc_post_pre", x1, first, mid), ("mhc_post_head", x2, mid, last)):
            args = [to_torch(a) for a in (x, prev["streams"], prev["post"], prev["comb"])]
            stat((op, "streams")).add(out["streams"], official_post(*args, torch.float64),
                                      official_post(*args, torch.float32), tf.post(*args))

        # head collapse
        s = to_torch(last["streams"])
        tp = [to_torch(a) for a in ph]
        stat(("mhc_post_head", "y")).add(last["y"], official_head(s, *tp, torch.float64),
                                         official_head(s, *tp, torch.float32), tf.head_collapse(s, *tp))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=2)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    stats: dict = {}
    measure(args.seeds, args.hidden, args.rows, stats, Transformers(args.hidden))
    import transformers
    print(f"# mHC contract accuracy: D={args.hidden}, M={args.rows}, {args.seeds} random boundaries per op; "
          f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}, "
          f"ml_dtypes {ml_dtypes.__version__}, {platform.machine()}; {time.perf_counter() - t0:.1f} s")
    print()
    print("| op | output | " + " | ".join(Stat.COLS) + " |")
    print("|---|---|" + "---|" * len(Stat.COLS))
    order = {"mhc_pre": 0, "mhc_post_pre": 1, "mhc_post_head": 2}
    outs = {"streams": 0, "y": 1, "post": 2, "comb": 3}
    for (op, name), st in sorted(stats.items(), key=lambda kv: (order[kv[0][0]], outs[kv[0][1]])):
        print(f"| {op} | {name} | " + " | ".join(st.cells()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
