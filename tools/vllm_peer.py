"""The production peer: the same cycle with vLLM's own mHC kernels, loaded from vLLM's Python sources.

vLLM serves DeepSeek-V4 on CUDA with TileLang kernels (vllm/models/deepseek_v4/nvidia/model.py):
`mhc_pre_broadcast_tilelang` at the first boundary (it requires vLLM's fused RMSNorm, so the peer's
unfused cycle runs `mhc_pre_tilelang` on the four copies there), `mhc_fused_post_pre_tilelang` between sub-blocks
and `mhc_post_tilelang` + `hc_head_fused_kernel_tilelang` at the head. Without TileLang, vLLM's CUDA
path is its torch reference (`mhc_post_torch`, `mhc_pre_torch`) with its Triton head
(`hc_head_reduce_triton_kernel`): the "triton" path here, which needs only torch and triton.
The sources are imported from a folder given at run time (the folder that holds `vllm/`), never
copied here. All-reduces are torch sums of the partials (the order of tools/bench_replay.py's torch
cycle); the whole cycle is captured as one CUDA graph. Outputs are compared bit-for-bit with the
contracts: vLLM's kernels are not expected to be exact, the count says how far they are.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_baseline import cycle_runner, device_values, event_ms, graph_of  # noqa: E402

PATHS = ("triton", "tilelang")
STOOD_IN: list[str] = []


def source_root(src: Path) -> Path:
    """The folder holding vllm/: `src` itself, its parent, or a .tgz of vLLM's .py files unpacked once."""
    root = Path(src)
    if root.is_file() and root.name.endswith((".tgz", ".tar.gz")):
        import tarfile
        import tempfile
        dest = Path(tempfile.gettempdir()) / f"vllm-peer-src-{root.stat().st_size}"
        if not (dest / "vllm").is_dir():
            tmp = Path(tempfile.mkdtemp(dir=tempfile.gettempdir()))
            with tarfile.open(root) as tf:
                tf.extractall(tmp, filter="data")
            tmp.rename(dest)
        root = dest
    return root


def _declare_distribution(root: Path) -> None:
    """vLLM's platform detection asks importlib.metadata for its own version and turns a missing
    distribution into an ImportError that disables Triton; sources without the wheel's metadata get a
    minimal dist-info (name and the version in vllm/_version.py) in a temporary folder on sys.path."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        version("vllm")
        return
    except PackageNotFoundError:
        pass
    import re
    import tempfile
    text = (root / "vllm" / "_version.py").read_text() if (root / "vllm" / "_version.py").exists() else ""
    m = re.search(r"""(?:__version__|version)\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", text)
    meta = Path(tempfile.mkdtemp(prefix="vllm-peer-meta-"))
    info = meta / f"vllm-{m.group(1) if m else '0.0.0'}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {m.group(1) if m else '0.0.0'}\n")
    sys.path.append(str(meta))


COMPILED = ("vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch")


def _compiled_extensions_absent(root: Path) -> list[str]:
    """vllm/platforms/cuda.py imports vLLM's compiled op library at its top (to register torch.ops._C);
    sources without the wheel's .so files cannot. The mHC kernels the peer runs are TileLang and Triton
    JIT kernels and torch code that call none of those ops, so an empty module stands in for each absent
    library: should any peer function reach a compiled op after all, torch.ops raises (never a silent
    wrong answer). Returns the names that were stood in for, for the report."""
    import importlib.machinery
    import importlib.util
    import types
    absent = []
    for name in COMPILED:
        stem = name.rsplit(".", 1)[1]
        if name in sys.modules or any((root / "vllm").glob(stem + "*.so")) \
                or importlib.util.find_spec(name) is not None:
            continue
        mod = types.ModuleType(name)
        mod.__doc__ = "stand-in: vLLM's compiled extension is not present beside these sources"
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = mod
        absent.append(name)
    return absent


def load(src: Path, path: str):
    """vLLM's mHC functions for `path`; raises ImportError with the reason where they cannot load."""
    root = source_root(src)
    if (root / "vllm").is_dir():
        pass
    elif root.name == "vllm" and (root / "__init__.py").exists():
        root = root.parent
    else:
        raise ImportError(f"{src}: no vllm/ package sources there")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    _declare_distribution(root)
    global STOOD_IN
    STOOD_IN = sorted(set(STOOD_IN) | set(_compiled_extensions_absent(root)))
    import importlib
    k = "vllm.model_executor.kernels.mhc."
    if path == "tilelang":
        import tilelang  # noqa: F401  (the wheel; vLLM imports it lazily, fail early with its own reason)
        t = importlib.import_module(k + "tilelang")
        # vLLM's broadcast first pre (mhc_pre_broadcast_tilelang) asserts a fused RMSNorm weight: the
        # unfused cycle's first boundary runs its mhc_pre_tilelang on the 4 copies instead (same math)
        return {"pre": t.mhc_pre_tilelang, "post_pre": t.mhc_fused_post_pre_tilelang,
                "post": t.mhc_post_tilelang, "head": t.hc_head_fused_kernel_tilelang}
    tt = importlib.import_module(k + "torch")
    tr = importlib.import_module(k + "triton")
    return {"pre": tt.mhc_pre_torch, "post": tt.mhc_post_torch, "head_triton": tr.hc_head_reduce_triton_kernel}


def cycle_fn(cyc, values, device, fns: dict, path: str):
    """run() computing the cycle with vLLM's functions; out: buffer id -> tensor, per rank."""
    import torch
    g = cyc.geometry
    bf16 = torch.bfloat16
    hc = g.hc
    eps, neps, iters = g.mhc.hc_eps, g.mhc.norm_eps, g.mhc.sinkhorn_iters

    bufs = device_values(values, device)

    def boundary(cmd, s, b):
        x = s[cmd.inputs["x"]].to(bf16)
        fn, base, scale = b[cmd.inputs["fn"]], b[cmd.inputs["base"]], b[cmd.inputs["scale"]]
        o = cmd.outputs
        if cmd.op == "mhc_pre":
            st = x.unsqueeze(1).expand(-1, hc, -1).contiguous()
            post, comb, y = fns["pre"](st, fn, scale, base, neps, eps, eps, 2.0, iters)
        elif cmd.op == "mhc_post_pre":
            res = s[cmd.inputs["residual"]]
            pin = s[cmd.inputs["post"]].reshape(-1, hc, 1)
            cin = s[cmd.inputs["comb"]].reshape(-1, hc, hc)
            if path == "tilelang":
                st, post, comb, y = fns["post_pre"](x, res, pin, cin, fn, scale, base, neps, eps, eps, 2.0,
                                                    iters)
            else:
                st = fns["post"](x, res, pin, cin)
                post, comb, y = fns["pre"](st, fn, scale, base, neps, eps, eps, 2.0, iters)
        else:
            res = s[cmd.inputs["residual"]]
            pin = s[cmd.inputs["post"]].reshape(-1, hc, 1)
            cin = s[cmd.inputs["comb"]].reshape(-1, hc, hc)
            st = fns["post"](x, res, pin, cin)
            if path == "tilelang":
                y = fns["head"](st, fn, scale, base, neps, eps)
            else:
                y = torch.empty(st.shape[0], st.shape[2], dtype=bf16, device=st.device)
                fns["head_triton"](st, fn, scale, base, y, neps, eps)
            post = comb = None
        s[o["streams"]], s[o["y"]] = st, y
        if post is not None:
            s[o["next_post"]] = post.reshape(-1, hc)
            s[o["next_comb"]] = comb.reshape(-1, hc, hc)
    return cycle_runner(cyc, bufs, boundary)


def measure(cyc, values, expected, src: Path, path: str, reps: int = 20) -> dict:
    """Median ms of one CUDA graph of the cycle with vLLM's kernels, and its mismatching elements."""
    import torch
    fns = load(src, path)
    dev = torch.device("cuda")
    run, out = cycle_fn(cyc, values, dev, fns, path)
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    bad = total = 0
    for r in range(cyc.ranks):
        for b in cyc.outputs():
            got = out[r][b.id]
            want = expected[r][b.id]
            a = got.contiguous().cpu()
            a = (a.view(torch.int16).numpy().view(np.uint16) if a.dtype == torch.bfloat16
                 else a.float().numpy().view(np.uint32))
            w = np.ascontiguousarray(want).view(np.uint16 if want.dtype.itemsize == 2 else np.uint32)
            bad += int(np.count_nonzero(a.reshape(w.shape) != w))
            total += w.size
    graph = graph_of(run)
    times = [event_ms(graph.replay) for _ in range(reps + 3)][3:]
    del graph
    torch.cuda.empty_cache()
    return {"ms": statistics.median(times), "mismatches": bad, "elements": total,
            "stand_ins": list(STOOD_IN)}
