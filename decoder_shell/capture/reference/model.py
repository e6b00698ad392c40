"""The reference model: `transformers` DeepSeek-V4 modules at a small size, split over R ranks.

Weights come from one seeded initialisation of the whole model (every rank builds the same full
model, then keeps its slice), so no download is needed and every run has the same bits. The split
follows what TP engines do, with an all-reduce of partial sums after each split block:

- embedding: vocab-parallel (rank r holds rows [rV/R, (r+1)V/R); other ids give zeros), all-reduced;
- attention: heads and output groups split (q_b_proj rows, sinks, o_a_proj groups, o_b_proj columns);
  the shared MQA projections (q_a, kv) are replicated; the output partial sums are all-reduced;
- MoE: routed experts split (rank r runs experts [rE/R, (r+1)E/R)), the shared expert's intermediate
  split, router replicated; the partial sums are all-reduced;
- draft (MTP-style block, the layer after the target's last): its input projection over
  [norm(embed), norm(hidden)] is split by input columns and all-reduced.
Everything else (mHC, norms, head, lm_head) is replicated, as the mHC is in TP engines.

At DeepSeek-V4-Flash size (`ModelShape.large`) a full fp32 model per rank would be tens of GB on the
host, so each rank builds the same structure on the meta device, keeps its slices, allocates them on
its own device and draws its weights there (`seeded_init`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from transformers.models.deepseek_v4.modeling_deepseek_v4 import (
    DeepseekV4Attention, DeepseekV4Experts, DeepseekV4ForCausalLM,
    DeepseekV4HyperHead, DeepseekV4MLP, DeepseekV4RMSNorm, DeepseekV4RotaryEmbedding)

from .shape import ModelShape

KEEP_FP32 = ("norm", "hc", "sinks", "e_score_correction_bias")  # as transformers keeps them for DSV4


def all_reduce(t: torch.Tensor) -> torch.Tensor:
    """Sum partials across the TP group in place (what the capture plugin sees)."""
    t = t.contiguous()
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t)
    return t


class VocabParallelEmbedding(nn.Module):
    def __init__(self, full: torch.Tensor, rank: int, tp: int):
        super().__init__()
        n = full.shape[0] // tp
        self.lo, self.hi = rank * n, (rank + 1) * n
        self.weight = nn.Parameter(full[self.lo:self.hi].clone(), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.lo
        inside = (local >= 0) & (local < self.weight.shape[0])
        out = F.embedding(local.clamp(0, self.weight.shape[0] - 1), self.weight)
        return all_reduce(out * inside.unsqueeze(-1).to(out.dtype))


class TPAttention(nn.Module):
    """A stock DeepseekV4Attention over this rank's heads, then the all-reduce of its output."""

    def __init__(self, full: DeepseekV4Attention, shape: ModelShape, layer_idx: int, rank: int, tp: int):
        super().__init__()
        h, g = shape.heads // tp, shape.groups // tp
        self.inner = DeepseekV4Attention(shape.config(layers=layer_idx + 1, num_attention_heads=h, o_groups=g),
                                         layer_idx)
        hd, ol = shape.head_dim, shape.o_lora_rank
        sd = {k: v for k, v in full.state_dict().items()}
        sd["q_b_proj.weight"] = sd["q_b_proj.weight"][rank * h * hd:(rank + 1) * h * hd]
        sd["sinks"] = sd["sinks"][rank * h:(rank + 1) * h]
        sd["o_a_proj.weight"] = sd["o_a_proj.weight"][rank * g * ol:(rank + 1) * g * ol]
        sd["o_b_proj.weight"] = sd["o_b_proj.weight"][:, rank * g * ol:(rank + 1) * g * ol]
        self.inner.load_state_dict({k: v.clone() for k, v in sd.items()})

    def forward(self, hidden_states, **kwargs):
        out, weights = self.inner(hidden_states, **kwargs)
        return all_reduce(out), weights


class TPMoE(nn.Module):
    """Router replicated, this rank's routed experts and slice of the shared expert, then all-reduce."""

    def __init__(self, full, shape: ModelShape, rank: int, tp: int):
        super().__init__()
        e = shape.experts // tp
        self.lo, self.n = rank * e, e
        self.gate = full.gate
        self.experts = DeepseekV4Experts(shape.config(n_routed_experts=e))
        self.experts.gate_up_proj = nn.Parameter(full.experts.gate_up_proj[self.lo:self.lo + e].clone())
        self.experts.down_proj = nn.Parameter(full.experts.down_proj[self.lo:self.lo + e].clone())
        i = shape.moe_intermediate // tp
        self.shared = DeepseekV4MLP(shape.config(moe_intermediate_size=i))
        s = full.shared_experts
        self.shared.gate_proj.weight = nn.Parameter(s.gate_proj.weight[rank * i:(rank + 1) * i].clone())
        self.shared.up_proj.weight = nn.Parameter(s.up_proj.weight[rank * i:(rank + 1) * i].clone())
        self.shared.down_proj.weight = nn.Parameter(s.down_proj.weight[:, rank * i:(rank + 1) * i].clone())

    def forward(self, hidden_states, input_ids=None):
        b, s, d = hidden_states.shape
        _, weights, indices = self.gate(hidden_states)
        local = indices - self.lo
        local = torch.where((local >= 0) & (local < self.n), local, torch.full_like(local, self.n))
        routed = self.experts(hidden_states.reshape(-1, d), local, weights).view(b, s, d)
        return all_reduce(routed + self.shared(hidden_states))


class DraftInput(nn.Module):
    """MTP-style draft input: eh_proj([enorm(embed(tokens)), hnorm(hidden)]), split by input columns."""

    def __init__(self, full_proj: nn.Linear, enorm, hnorm, rank: int, tp: int):
        super().__init__()
        k = full_proj.weight.shape[1] // tp
        self.cols = slice(rank * k, (rank + 1) * k)
        self.weight = nn.Parameter(full_proj.weight[:, self.cols].clone(), requires_grad=False)
        self.enorm, self.hnorm = enorm, hnorm

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.enorm(embeds), self.hnorm(hidden)], dim=-1)
        return all_reduce(F.linear(x[..., self.cols], self.weight))


class RankModel(nn.Module):
    """One rank's share of the target model and of the draft block."""

    def __init__(self, shape: ModelShape, rank: int, tp: int, seed: int = 0, device="cpu"):
        super().__init__()
        shape.check_tp(tp)
        self.shape = shape
        if shape.large:  # the structure on the meta device, then this rank's weights on `device`
            with torch.device("meta"):
                self._split(build_full(shape, seed, init=False), rank, tp)
            self.to_empty(device=device)
            self.rotary = DeepseekV4RotaryEmbedding(shape.config(), device=device)
            seeded_init(self, seed, rank)
        else:
            self._split(build_full(shape, seed), rank, tp)
            self.to(device)
        self.eval()

    def _split(self, full: DeepseekV4ForCausalLM, rank: int, tp: int) -> None:
        shape = self.shape
        m = full.model
        self.embed = VocabParallelEmbedding(m.embed_tokens.weight.data, rank, tp)
        self.draft_embed = nn.Embedding.from_pretrained(m.embed_tokens.weight.data.clone())  # replicated
        self.rotary = m.rotary_emb
        layers = list(m.layers)
        for i, layer in enumerate(layers):
            layer.self_attn = TPAttention(layer.self_attn, shape, i, rank, tp)
            layer.mlp = TPMoE(layer.mlp, shape, rank, tp)
        self.layers = nn.ModuleList(layers[:shape.layers])
        self.draft_layer = layers[shape.layers]
        self.hc_head, self.norm, self.lm_head = m.hc_head, m.norm, full.lm_head
        self.draft_input = DraftInput(full.draft_proj, full.draft_enorm, full.draft_hnorm, rank, tp)
        self.draft_head, self.draft_norm = full.draft_hc_head, full.draft_norm
        cast_for_serving(self)


SPLIT = (r"^embed\.", r"^draft_input\.weight$", r"self_attn\.inner\.(q_b_proj|sinks|o_a_proj|o_b_proj)",
         r"\.mlp\.(experts|shared)\.")


def seeded_init(model: nn.Module, seed: int, rank: int) -> None:
    """Deterministic random weights drawn on the parameters' own device: each parameter from its own
    stream, seeded by (seed, name) when it is replicated (every rank draws the same bits: the mHC,
    norms, router, shared projections) and by (seed, name, rank) when it is this rank's slice."""
    import re
    import zlib
    with torch.no_grad():
        for name, p in model.named_parameters():
            split = any(re.search(k, name) for k in SPLIT)
            g = torch.Generator(device=p.device)
            g.manual_seed(zlib.crc32(f"{seed}:{name}:{rank if split else 'all'}".encode()))
            leaf = name.rsplit(".", 1)[-1]
            if leaf in ("fn", "hc_fn"):
                p.normal_(0.0, p.shape[1] ** -0.5, generator=g)
            elif leaf in ("base", "hc_base"):
                p.normal_(0.0, 0.5, generator=g)
            elif leaf in ("scale", "hc_scale"):
                p.uniform_(0.25, 1.5, generator=g)
            elif "norm" in name and p.dim() == 1:
                p.fill_(1.0)
            elif leaf in ("sinks", "e_score_correction_bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=g)
        for name, b in model.named_buffers():  # the router's correction bias; rotary is rebuilt
            if not name.startswith("rotary."):
                b.zero_()


def build_full(shape: ModelShape, seed: int, init: bool = True) -> DeepseekV4ForCausalLM:
    """The whole model, fp32, from one seed: target layers plus the draft (MTP) layer after them
    (with `init=False` only its structure, as on the meta device)."""
    torch.manual_seed(seed)
    cfg = shape.config(layers=shape.layers + 1)
    full = DeepseekV4ForCausalLM(cfg)
    g = torch.Generator().manual_seed(seed + 1)
    full.draft_proj = nn.Linear(2 * shape.hidden, shape.hidden, bias=False)
    full.draft_enorm = DeepseekV4RMSNorm(shape.hidden, eps=cfg.rms_norm_eps)
    full.draft_hnorm = DeepseekV4RMSNorm(shape.hidden, eps=cfg.rms_norm_eps)
    full.draft_norm = DeepseekV4RMSNorm(shape.hidden, eps=cfg.rms_norm_eps)
    full.draft_hc_head = DeepseekV4HyperHead(cfg)
    if not init:
        return full.eval()
    with torch.no_grad():
        full.draft_proj.weight.normal_(0.0, cfg.initializer_range, generator=g)
        heads = [full.model.hc_head, full.draft_hc_head]
        hcs = [m for layer in full.model.layers for m in (layer.attn_hc, layer.ffn_hc)]
        for hc in hcs:  # mHC params at realistic scales (stock init leaves base 0, scale 1)
            _mhc_init(hc.fn, hc.base, hc.scale, g)
        for h in heads:
            _mhc_init(h.hc_fn, h.hc_base, h.hc_scale, g)
    return full.eval()


def _mhc_init(fn, base, scale, g):
    fn.copy_(torch.randn(fn.shape, generator=g) / fn.shape[1] ** 0.5)
    base.copy_(torch.randn(base.shape, generator=g) * 0.5)
    scale.copy_(torch.rand(scale.shape, generator=g) * 1.25 + 0.25)


def cast_for_serving(module: nn.Module) -> None:
    """bf16 weights, except what DeepSeek-V4 keeps in fp32 (mHC, norms, sinks, router bias)."""
    for name, p in module.named_parameters():
        if not any(k in name for k in KEEP_FP32):
            p.data = p.data.to(torch.bfloat16)
