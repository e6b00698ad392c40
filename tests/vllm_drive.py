"""A rank process of a real vLLM 0.33 TP group on gloo (CPU) driving DeepSeek-V4's mHC call sites.

The capture plugin is loaded the way vLLM loads it (`load_general_plugins`), the TP group is vLLM's
own (`init_distributed_environment` + `initialize_model_parallel`), the all-reduces go through vLLM's
GroupCoordinator and `vllm::all_reduce`, and every mHC step is a call through the module globals of
`vllm.models.deepseek_v4.nvidia.model` / `.mtp`, whose TileLang functions (GPU only) are first
replaced by vLLM's own torch references (`vllm.model_executor.kernels.mhc.torch`) plus vLLM's RMSNorm
for the fused norm. The draft and verify markers are vllm_runner's wrappers around the two steps.
"""

from __future__ import annotations

import os
import time

import torch

HC = 4
EPS = 1e-6
SINKHORN = 20


# --- TileLang signatures over vLLM's torch references --------------------------------------------
def _norm(y, w, eps):
    from vllm.model_executor.layers.layernorm import RMSNorm
    norm = RMSNorm(y.shape[-1], eps, dtype=w.dtype)
    norm.weight.data.copy_(w)
    return norm.forward_native(y)


def _pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
         sinkhorn_repeat, n_splits=1, norm_weight=None, norm_eps=1e-6):
    from vllm.model_executor.kernels.mhc.torch import mhc_pre_torch
    post, comb, y = mhc_pre_torch(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                                  hc_post_mult_value, sinkhorn_repeat)
    if norm_weight is not None:
        y = _norm(y, norm_weight, norm_eps)
    return post, comb, y


def pre_broadcast(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                  sinkhorn_repeat, n_splits=1, norm_weight=None, norm_eps=1e-6, fn_broadcast=None):
    streams = residual.unsqueeze(1).expand(-1, fn.shape[1] // residual.shape[-1], -1).contiguous()
    post, comb, y = _pre(streams, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                         hc_post_mult_value, sinkhorn_repeat, norm_weight=norm_weight, norm_eps=norm_eps)
    return streams, post, comb, y


def post(x, residual, post_layer_mix, comb_res_mix):
    from vllm.model_executor.kernels.mhc.torch import mhc_post_torch
    return mhc_post_torch(x, residual, post_layer_mix, comb_res_mix)


def fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                   hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat, n_splits=1, tile_n=1,
                   norm_weight=None, norm_eps=1e-6):
    streams = post(x, residual, post_layer_mix, comb_res_mix)
    p, c, y = _pre(streams, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                   sinkhorn_repeat, norm_weight=norm_weight, norm_eps=norm_eps)
    return streams, p, c, y


def head(hs_flat, fn, hc_scale, hc_base, rms_eps, hc_eps):
    x = hs_flat.flatten(1).float()
    mixes = (x @ fn.t()) * torch.rsqrt(x.square().mean(-1, keepdim=True) + rms_eps)
    pre = torch.sigmoid(mixes * hc_scale[0] + hc_base) + hc_eps
    return (pre.unsqueeze(-1) * hs_flat.float()).sum(1).to(torch.bfloat16)


def use_torch_references():
    """Bind the torch implementations where the model modules bind TileLang's (before the plugin wraps)."""
    import vllm.models.deepseek_v4.nvidia.model as model
    import vllm.models.deepseek_v4.nvidia.mtp as mtp
    for mod in (model, mtp):
        for name, fn in (("mhc_pre_broadcast_tilelang", pre_broadcast), ("mhc_pre_tilelang", _pre),
                         ("mhc_fused_post_pre_tilelang", fused_post_pre), ("mhc_post_tilelang", post),
                         ("hc_head_fused_kernel_tilelang", head)):
            if hasattr(mod, name):
                setattr(mod, name, fn)


# --- the drive --------------------------------------------------------------------------------------
class Params:
    def __init__(self, d, layers, seed=11):
        g = torch.Generator().manual_seed(seed)
        def mix(n):
            return (torch.randn(n, HC * d, generator=g) / (HC * d) ** 0.5, torch.randn(n, generator=g) * 0.5,
                    torch.rand(3, generator=g) + 0.25)
        self.sub = [mix((2 + HC) * HC) for _ in range(2 * layers)]
        self.norm = [(1 + 0.1 * torch.randn(d, generator=g)).to(torch.bfloat16) for _ in range(2 * layers)]
        self.head = mix(HC)
        self.w = [torch.randn(d, d, generator=g) / d ** 0.5 for _ in range(2 * layers)]


def _reduce(s, x):
    """Attention sub-blocks reduce through GroupCoordinator.all_reduce, MoE through vllm::all_reduce."""
    from vllm.distributed import get_tp_group
    tp = get_tp_group()
    if s % 2 == 0:
        return tp.all_reduce(x)
    return torch.ops.vllm.all_reduce(x, group_name=tp.unique_name)


def _block(model, rank, p, s0, n_sub, x, residual, post_mix, res_mix):
    """n_sub sub-blocks: a rank's partial output, its all-reduce, then hc_post + the next hc_pre."""
    for s in range(s0, s0 + n_sub):
        partial = ((x.float() @ p.w[s]) * (0.5 + rank)).to(torch.bfloat16)
        out = _reduce(s, partial)
        if s == s0 + n_sub - 1:
            return out, residual, post_mix, res_mix
        fn, base, scale = p.sub[s + 1]
        residual, post_mix, res_mix, x = model.mhc_fused_post_pre_tilelang(
            out, residual, post_mix, res_mix, fn, scale, base, EPS, EPS, EPS, 2.0, SINKHORN,
            n_splits=1, tile_n=1, norm_weight=p.norm[s + 1], norm_eps=EPS)


def _embed(rank, rows, d, step):
    from vllm.distributed import tensor_model_parallel_all_reduce
    g = torch.Generator().manual_seed(1000 * step + rank)
    return tensor_model_parallel_all_reduce(torch.randn(rows, d, generator=g).to(torch.bfloat16))


def target(rank, p, rows, d, layers, step):
    """The verify step: embedding all-reduce, broadcast pre, 2*layers sub-blocks, last post, head."""
    import vllm.models.deepseek_v4.nvidia.model as model
    from vllm.distributed import get_world_group
    emb = _embed(rank, rows, d, step)
    # a reduction of another group over the same ranks: not the cycle's, must be passed over
    torch.distributed.all_reduce(torch.ones(3, dtype=torch.bfloat16), group=get_world_group().device_group)
    fn, base, scale = p.sub[0]
    residual, post_mix, res_mix, x = model.mhc_pre_broadcast_tilelang(
        emb, fn, scale, base, EPS, EPS, EPS, 2.0, SINKHORN, norm_weight=p.norm[0], norm_eps=EPS,
        fn_broadcast=fn.view(fn.shape[0], HC, d).sum(1))
    out, residual, post_mix, res_mix = _block(model, rank, p, 0, 2 * layers, x, residual, post_mix, res_mix)
    hidden = model.mhc_post_tilelang(out, residual, post_mix, res_mix)
    hfn, hbase, hscale = p.head
    return model.hc_head_fused_kernel_tilelang(hidden, hfn, hscale[:1], hbase, EPS, EPS)


def draft(rank, p, rows, d, step, k):
    """speculator.propose: the first MTP pass over `rows`, then k-1 one-row passes (not in the cycle)."""
    import vllm.models.deepseek_v4.nvidia.model as model
    import vllm.models.deepseek_v4.nvidia.mtp as mtp
    for j in range(k):
        n = rows if j == 0 else 1
        emb = _embed(rank, n, d, 7 * step + j)
        streams = (emb.float().unsqueeze(1) * torch.linspace(0.5, 1.5, HC).view(1, HC, 1)).to(torch.bfloat16)
        fn, base, scale = p.sub[0]
        post_mix, res_mix, x = model.mhc_pre_tilelang(streams, fn, scale, base, EPS, EPS, EPS, 2.0, SINKHORN,
                                                      norm_weight=p.norm[0], norm_eps=EPS)
        out, residual, post_mix, res_mix = _block(model, rank, p, 0, 2, x, streams, post_mix, res_mix)
        hidden = mtp.mhc_post_tilelang(out, residual, post_mix, res_mix).flatten(1)
        hfn, hbase, hscale = p.head
        mtp.hc_head_fused_kernel_tilelang(hidden.view(-1, HC, d), hfn, hscale[:1], hbase, EPS, EPS)


def rank_main(rank, world, port, run_dir, out, geometry_json, steps, queue):
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ["DECODER_SHELL_CAPTURE"] = "1"
    torch.set_num_threads(1)
    try:
        use_torch_references()
        from vllm.config import VllmConfig, set_current_vllm_config
        from vllm.plugins import load_general_plugins
        load_general_plugins()  # the entry point: patches only
        with set_current_vllm_config(VllmConfig()):
            _drive(rank, world, port, run_dir, out, geometry_json, steps, queue)
    except BaseException:  # reported to the test, which fails with it
        import traceback
        queue.put((rank, None, traceback.format_exc()))
        raise


def _drive(rank, world, port, run_dir, out, geometry_json, steps, queue):
    if True:
        from vllm.distributed import (get_world_group, init_distributed_environment,
                                      initialize_model_parallel)
        init_distributed_environment(world_size=world, rank=rank, local_rank=rank,
                                     distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo")
        initialize_model_parallel(tensor_model_parallel_size=world)
        from decoder_shell.capture import vllm_runner
        from decoder_shell.geometry import Geometry
        g = Geometry.from_json(geometry_json)
        plugin = vllm_runner.install_for_group(
            __import__("vllm.distributed", fromlist=["get_tp_group"]).get_tp_group(), run_dir=run_dir,
            token_file=os.path.join(run_dir, "token"), control_port=None, geometry=g, service={"name": "vllm"})
        p = Params(g.hidden, g.layers)
        k = g.verify_rows - 1
        execute_model = vllm_runner.verify(lambda step: target(rank, p, g.verify_rows, g.hidden, g.layers, step))
        propose = vllm_runner.draft(lambda step: draft(rank, p, g.draft_rows, g.hidden, step, k))
        if rank == 0:
            code, status = plugin.coordinator.arm({"geometry": g.to_json(), "cycles": 1, "out": out})
            assert code == 202, status
        world_group = get_world_group()
        for step in range(steps):
            execute_model(step)
            propose(step)
        status = None
        if rank == 0:
            for _ in range(1200):
                status = plugin.coordinator.status()
                if status["state"] in ("done", "error"):
                    break
                time.sleep(0.05)
        world_group.barrier()
        queue.put((rank, status, None))
