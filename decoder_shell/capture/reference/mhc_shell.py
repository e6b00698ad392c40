"""`--mhc shell`: the shell's mHC contracts swapped into the stock `transformers` modules.

The modules keep their class hierarchy, parameters and call signatures (so the capture plugin's
hooks and everything around them are unchanged); only the arithmetic becomes decoder_shell.contracts.mhc,
so captured mHC outputs equal the contract bit for bit.
"""

from __future__ import annotations

from transformers.models.deepseek_v4.modeling_deepseek_v4 import (
    DeepseekV4DecoderLayer, DeepseekV4HyperConnection, DeepseekV4HyperHead)

from ...contracts import mhc
from ...contracts.mhc import MhcParams
from ..tensors import to_numpy, to_torch


def _norm_eps(norm) -> float:
    """The unweighted RMSNorm's epsilon: `eps` up to transformers 5.24, `variance_epsilon` from 5.25."""
    eps = getattr(norm, "eps", None)
    return norm.variance_epsilon if eps is None else eps


def _params(module, eps) -> MhcParams:
    return MhcParams(hc_eps=eps, norm_eps=_norm_eps(module.input_norm),
                     sinkhorn_iters=getattr(module, "hc_sinkhorn_iters", 20))


class ShellHyperConnection(DeepseekV4HyperConnection):
    """hc_pre by the contract: (post, comb, collapsed) like the stock module."""

    def forward(self, hidden_streams):
        b, s, hc, d = hidden_streams.shape
        streams = to_numpy(hidden_streams).reshape(b * s, hc, d)
        p = _params(self, self.hc_eps)
        mixes = mhc.mhc_mixes(streams, to_numpy(self.fn), p.norm_eps)
        pre, post, comb = mhc.mhc_split(mixes, to_numpy(self.base), to_numpy(self.scale), hc, p)
        y = mhc.collapse(pre, streams)
        like = hidden_streams
        return (to_torch(post, like).view(b, s, hc), to_torch(comb, like).view(b, s, hc, hc),
                to_torch(y, like).view(b, s, d))


class ShellHyperHead(DeepseekV4HyperHead):
    """Head collapse by the contract."""

    def forward(self, x):
        b, s, hc, d = x.shape
        p = _params(self, self.eps)
        y = mhc.mhc_head_collapse(to_numpy(x).reshape(b * s, hc, d), to_numpy(self.hc_fn),
                                  to_numpy(self.hc_base), to_numpy(self.hc_scale), p)
        return to_torch(y, x).view(b, s, d)


class ShellDecoderLayer(DeepseekV4DecoderLayer):
    """The stock layer's forward with hc_post by the contract (fp32, one rounding to bf16)."""

    def forward(self, hidden_states, input_ids=None, **kwargs):
        post, comb, collapsed = self.attn_hc(hidden_states)
        attn_output, _ = self.self_attn(self.input_layernorm(collapsed), **kwargs)
        hidden_states = _post(attn_output, hidden_states, post, comb)
        post, comb, collapsed = self.ffn_hc(hidden_states)
        mlp_output = self.mlp(self.post_attention_layernorm(collapsed), input_ids=input_ids)
        return _post(mlp_output, hidden_states, post, comb)


def _post(x, residual, post, comb):
    b, s, hc, d = residual.shape
    out = mhc.mhc_post(to_numpy(x).reshape(b * s, d), to_numpy(residual).reshape(b * s, hc, d),
                       to_numpy(post).reshape(b * s, hc), to_numpy(comb).reshape(b * s, hc, hc))
    return to_torch(out, residual).view(b, s, hc, d)


def swap_in(model) -> None:
    """Point every decoder layer, hyper-connection and head of `model` at the contract versions."""
    for layer in [*model.layers, model.draft_layer]:
        layer.__class__ = ShellDecoderLayer
        layer.attn_hc.__class__ = ShellHyperConnection
        layer.ffn_hc.__class__ = ShellHyperConnection
    for head in (model.hc_head, model.draft_head):
        head.__class__ = ShellHyperHead
