"""Benchmark: the shell's CUDA replay against PyTorch eager and one torch CUDA graph of the same work.

dsv4-flash geometry (D=4096, 43 layers: 86 sub-blocks + the embedding reduction = 87 all-reduces and
86 mHC boundaries per rank), TP ranks emulated on one GPU, verify rows M = 1, 2, 4, 8, no draft
phase (the DESIGN.md 9 table's work). Every side runs the same cycle: per rank, each all-reduce sums
the R partials, each boundary runs hc_post + hc_pre (transformers-style math on the torch side).
Also measured: the launch floor (the same graph with every command an empty kernel), the baseline
without programmatic dependent launch (plain graph edges), the fused variants, and the persistent
cycle (one resident cooperative kernel, `--persistent`) and the cluster cycle (one kernel of 16-block clusters,
`--persistent-cluster`). The production peer (`--vllm-src PATH`, the
folder holding vLLM's `vllm/` sources): the same cycle with vLLM's own mHC kernels in one torch CUDA
graph (tools/vllm_peer.py; its Triton path always, TileLang where the tilelang wheel is installed),
with its mismatching elements against the contracts. `--torch-compile M ...`: the torch cycle with its mHC
functions through torch.compile (inductor), in one CUDA graph, at those M. All times: CUDA events, warm-up first, medians
over epochs, slowest rank; ratios last. The shell's events are nodes of the graphs they time (the cluster cycle's: a
one-kernel graph), the torch side's are recorded behind a held stream (torch_baseline.event_ms): no side's time holds
the host's work of submitting its launches.

    python tools/bench_replay.py [--rows 1 2 4 8] [--tp 4] [--epochs 50] [--persistent] [--persistent-cluster]
                                 [--sinkhorn-forms regs regs-shared]
                                 [--vllm-src /path/to/vllm-src] [--torch-compile 2 8] [--only-main]
                                 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_shell.commands.program import build_cycle, reference  # noqa: E402
from decoder_shell.contracts.allreduce import RingContract  # noqa: E402
from decoder_shell.corpus.synth import injected_values  # noqa: E402
from decoder_shell.drivers import get_driver  # noqa: E402
from decoder_shell.drivers.cuda.kernels import SINKHORN_FORMS  # noqa: E402
from decoder_shell.geometry import preset  # noqa: E402
from decoder_shell.replay.compare import mismatches  # noqa: E402
from torch_baseline import cycle_runner, device_values, event_ms, graph_of  # noqa: E402


#: Builds a bench row can ask for: a Sinkhorn form (kernels.SINKHORN_FORMS), "+late" for the persistent
#: kernel with a unit's weights requested after post and comb (DECODER_SHELL_CUDA_PERSIST_LATE).
FORMS = [f + late for f in SINKHORN_FORMS for late in ("", "+late")]


@contextmanager
def sinkhorn_form(name: str | None):
    """The build `name` (FORMS) while a session compiles its kernels (None: the environment's own)."""
    keys = ("DECODER_SHELL_CUDA_SINKHORN", "DECODER_SHELL_CUDA_PERSIST_LATE")
    old = {k: os.environ.get(k) for k in keys}
    if name:
        os.environ[keys[0]] = name.split("+")[0]
        os.environ[keys[1]] = "1" if name.endswith("+late") else "0"
    try:
        yield
    finally:
        if name:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def shell_times(drv, cyc, values, expected, variants, epochs, warmup=10, sinkhorn=None):
    """Median slowest-rank ms per cycle of graph epochs, and the mismatch count of a checked epoch.
    sinkhorn: the build its kernels get (FORMS; None: the default)."""
    with sinkhorn_form(sinkhorn):
        s = drv.load(cyc, variants)
    with s:
        for r in range(cyc.ranks):
            for bid, a in values[r].items():
                s.write(r, bid, a)
        for _ in range(warmup):
            s.run()
        s.poison()
        s.run()
        bad = sum(mismatches(s.read(r, b.id), expected[r][b.id]) for r in range(cyc.ranks) for b in cyc.outputs())
        times = [max(s.run()) for _ in range(epochs)]
        return statistics.median(times), bad, s.node_count


def torch_cycle_fn(cyc, values, device, compiled=False):
    """Build the same cycle in torch (transformers-style mHC, sum of partials); returns (fn, outputs).
    compiled: the mHC functions go through torch.compile (inductor, static shapes, one compile per
    boundary form), as a user who compiles the model and captures one CUDA graph would run them."""
    import torch
    import torch.nn.functional as F

    g = cyc.geometry
    bf16 = torch.bfloat16

    bufs = device_values(values, device)
    eps, neps, iters, hc = g.mhc.hc_eps, g.mhc.norm_eps, g.mhc.sinkhorn_iters, g.hc

    def mixes_of(streams, fn):
        flat = streams.reshape(streams.shape[0], -1).float()
        flat = flat * torch.rsqrt(flat.square().mean(-1, keepdim=True) + neps)
        return F.linear(flat, fn)

    def hc_pre(streams, fn, base, scale):
        mixes = mixes_of(streams, fn)
        pre = torch.sigmoid(mixes[:, :hc] * scale[0] + base[:hc]) + eps
        post = 2 * torch.sigmoid(mixes[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
        comb = (mixes[:, 2 * hc:] * scale[2] + base[2 * hc:]).view(-1, hc, hc)
        comb = torch.softmax(comb, dim=-1) + eps
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
        for _ in range(iters - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + eps)
            comb = comb / (comb.sum(-2, keepdim=True) + eps)
        y = (pre.unsqueeze(-1) * streams).sum(1).to(bf16)
        return y, post, comb

    def hc_post(x, residual, post, comb):
        return (post.unsqueeze(-1) * x.float().unsqueeze(1)
                + torch.matmul(comb.transpose(-1, -2), residual.float())).to(bf16)

    if compiled:
        mixes_of = torch.compile(mixes_of, dynamic=False, fullgraph=True)
        hc_pre = torch.compile(hc_pre, dynamic=False, fullgraph=True)
        hc_post = torch.compile(hc_post, dynamic=False, fullgraph=True)

    def boundary(cmd, s, b):
        x = s[cmd.inputs["x"]]
        fn, base, scale = b[cmd.inputs["fn"]], b[cmd.inputs["base"]], b[cmd.inputs["scale"]]
        if cmd.op == "mhc_pre":
            streams = x.to(bf16).unsqueeze(1).expand(-1, hc, -1).contiguous()
        else:
            streams = hc_post(x, s[cmd.inputs["residual"]], s[cmd.inputs["post"]], s[cmd.inputs["comb"]])
        s[cmd.outputs["streams"]] = streams
        if cmd.op == "mhc_post_head":
            mixes = mixes_of(streams, fn)
            pre = torch.sigmoid(mixes * scale[0] + base) + eps
            s[cmd.outputs["y"]] = (pre.unsqueeze(-1) * streams).sum(1).to(bf16)
        else:
            y, post, comb = hc_pre(streams, fn, base, scale)
            s[cmd.outputs["y"]], s[cmd.outputs["next_post"]], s[cmd.outputs["next_comb"]] = y, post, comb
    return cycle_runner(cyc, bufs, boundary)[0]


def torch_times(cyc, values, eager_reps=3, graph_reps=20, compiled=False):
    import torch
    dev = torch.device("cuda")
    run = torch_cycle_fn(cyc, values, dev, compiled)
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    eager = statistics.median(event_ms(run) for _ in range(eager_reps)) if eager_reps else None
    graph = graph_of(run)
    for _ in range(3):
        graph.replay()
    g = statistics.median(event_ms(graph.replay) for _ in range(graph_reps))
    del graph
    torch.cuda.empty_cache()
    return eager, g


def vllm_rows(cyc, values, expected, src: Path, paths) -> dict:
    """The production peer's rows; a path that cannot load here is reported with its reason, not fatal."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import vllm_peer
    out = {}
    for path in paths:
        name = f"vllm {path} peer"
        try:
            out[name] = vllm_peer.measure(cyc, values, expected, src, path)
        except Exception as e:  # a peer that cannot run here (no tilelang wheel, ...) is a note, not a failure
            print(f"{name}: not run ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--cluster", action="store_true", help="also the thread-block-cluster mHC variant")
    ap.add_argument("--fixed-width", action="store_true", help="also the fixed-width fused-m2/m4/m8 variants")
    ap.add_argument("--persistent", action="store_true", help="also the persistent cycle kernel")
    ap.add_argument("--persistent-cluster", action="store_true",
                    help="also the cluster cycle kernel (one 16-block cluster per rank and row group)")
    ap.add_argument("--vllm-src", type=Path, help="folder holding vLLM's vllm/ sources: the production peer")
    ap.add_argument("--vllm-paths", nargs="+", default=["triton", "tilelang"], choices=["triton", "tilelang"])
    ap.add_argument("--only-main", action="store_true",
                    help="baseline, persistent, floor, torch graph and peers only (no eager torch, no ablation rows)")
    ap.add_argument("--sinkhorn-forms", nargs="*", default=[], choices=FORMS,
                    help="also the graph path and the persistent cycle built with these Sinkhorn forms (same "
                         "run; FORM+late: the persistent cycle only, weights requested after post and comb)")
    ap.add_argument("--torch-compile", type=int, nargs="*", default=[], metavar="M",
                    help="also torch.compile'd mHC in one CUDA graph at these M (inductor compiles once per M)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    drv = get_driver("cuda", placement="emulated")
    persistent = get_driver("cuda", placement="emulated", cycle="persistent") if args.persistent else None
    flags = get_driver("cuda", placement="emulated", cycle="persistent-flags") if args.persistent else None
    plain = get_driver("cuda", placement="emulated", pdl=False)
    clustered = get_driver("cuda", placement="emulated", cycle="persistent-cluster") if args.persistent_cluster else None
    rows_out = []
    for m in args.rows:
        g = preset("dsv4-flash", tp=args.tp, verify_rows=m, draft_rows=0)
        cyc = build_cycle(g, RingContract())
        values = injected_values(cyc, [7, m])
        t0 = time.time()
        expected = reference(cyc, values)
        mh = [c.index for c in cyc.commands if c.op != "allreduce"]
        configs = {"shell baseline": (drv, {})}
        if persistent is not None:
            configs["shell persistent"] = (persistent, {})
            configs["shell persistent, row flags"] = (flags, {})
        if clustered is not None:
            configs["shell persistent-cluster"] = (clustered, {})
        for form in args.sinkhorn_forms:  # same commands, the Sinkhorn built in another (bit-identical) form
            if not form.endswith("+late"):
                configs[f"shell baseline, sinkhorn {form}"] = (drv, {}, form)
            if persistent is not None:
                configs[f"shell persistent, sinkhorn {form}"] = (persistent, {}, form)
            if clustered is not None and not form.endswith("+late"):
                configs[f"shell persistent-cluster, sinkhorn {form}"] = (clustered, {}, form)
        if not args.only_main:
            configs.update({"shell baseline, plain edges (no PDL)": (plain, {}),
                            "shell grid-barrier mHC": (drv, {i: "grid-barrier" for i in mh}),
                            "shell fused-allreduce-mhc": (drv, {i: "fused-allreduce-mhc" for i in mh})})
        if args.cluster:
            configs["shell cluster"] = (drv, {i: "cluster" for i in mh})
        if m in (2, 4, 8) and args.fixed_width:
            configs[f"shell fused-m{m}"] = (drv, {i: f"fused-m{m}" for i in mh})
        configs["floor: empty kernels"] = (drv, {c.index: "empty" for c in cyc.commands})
        row = {"M": m, "tp": args.tp, "commands_per_rank": len(cyc.commands)}
        for name, (d, v, *form) in configs.items():
            med, bad, nodes = shell_times(d, cyc, values, expected, v, args.epochs, sinkhorn=form[0] if form else None)
            row[name] = {"ms": med, "mismatches": bad if "empty" not in name else None, "kernel_nodes": nodes}
        if not args.no_torch:
            eager, graph = torch_times(cyc, values, eager_reps=0 if args.only_main else 3)
            if eager is not None:
                row["torch eager"] = {"ms": eager}
            row["torch cuda graph"] = {"ms": graph}
        if m in args.torch_compile:
            c0 = time.time()
            _, cgraph = torch_times(cyc, values, eager_reps=0, compiled=True)
            row["torch.compile + cuda graph"] = {"ms": cgraph, "compile_s": round(time.time() - c0, 1)}
        if args.vllm_src:
            row.update(vllm_rows(cyc, values, expected, args.vllm_src, args.vllm_paths))
        row["seconds"] = round(time.time() - t0, 1)
        rows_out.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"driver": drv.describe(), "rows": rows_out}, indent=1))
    names = list(dict.fromkeys(k for r in rows_out for k in r if isinstance(r[k], dict)))
    print(f"\n{drv.describe()}, dsv4-flash, TP{args.tp} emulated, verify only; ms per cycle, slowest rank (median)")
    print("| implementation | " + " | ".join(f"M={r['M']}" for r in rows_out) + " |")
    print("|---|" + "---|" * len(rows_out))
    for n in names:
        print(f"| {n} | " + " | ".join(f"{r[n]['ms']:.3f}" if n in r else "-" for r in rows_out) + " |")
    for base in ("torch cuda graph", "torch.compile + cuda graph"):
        if any(base in r for r in rows_out):
            for n in names:
                if n.startswith("shell"):
                    print(f"| ratio {n} / {base} | " + " | ".join(
                        f"{r[n]['ms'] / r[base]['ms']:.4f}" if n in r and base in r else "-" for r in rows_out) + " |")
    for n in names:
        if "mismatches" in rows_out[0].get(n, {}) and rows_out[0][n]["mismatches"] is not None:
            print(f"| mismatching elements ({n}) | " + " | ".join(
                str(r[n]["mismatches"]) if n in r else "-" for r in rows_out) + " |")
    for peer in ("vllm tilelang peer", "vllm triton peer"):
        for n in ("shell baseline", "shell persistent", "shell persistent-cluster"):
            if all(peer in r and n in r for r in rows_out):
                print(f"| ratio {n} / {peer} | " + " | ".join(f"{r[n]['ms'] / r[peer]['ms']:.4f}" for r in rows_out) + " |")
    return rows_out


if __name__ == "__main__":
    main()
