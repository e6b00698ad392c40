"""The reference model's size: small, fixed, and divisible by every supported TP degree."""

from __future__ import annotations

from dataclasses import dataclass

from ...contracts.mhc import MhcParams
from ...errors import UsageError
from ...geometry import Geometry


@dataclass(frozen=True)
class ModelShape:
    """The small configuration the reference service runs (every split size divides 8 ranks)."""

    hidden: int = 64
    layers: int = 2
    vocab: int = 256
    heads: int = 8
    head_dim: int = 32
    groups: int = 8
    experts: int = 8
    top_k: int = 2
    moe_intermediate: int = 32
    q_lora_rank: int = 32
    o_lora_rank: int = 16

    def check_tp(self, tp: int) -> None:
        sizes = {"vocab": self.vocab, "heads": self.heads, "output groups": self.groups,
                 "experts": self.experts, "shared-expert width": self.moe_intermediate, "2*hidden": 2 * self.hidden}
        bad = [k for k, v in sizes.items() if v % tp]
        if tp < 1 or bad:
            raise UsageError(f"--tp {tp} does not divide the reference model's {', '.join(bad) or 'sizes'}; "
                             "use 1, 2, 4 or 8")

    def config(self, layers: int | None = None, **overrides):
        """The transformers DeepseekV4Config of this shape (imports transformers)."""
        from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config
        n = self.layers if layers is None else layers
        kw = dict(vocab_size=self.vocab, hidden_size=self.hidden, moe_intermediate_size=self.moe_intermediate,
                  num_hidden_layers=n, num_attention_heads=self.heads, num_key_value_heads=1,
                  head_dim=self.head_dim, q_lora_rank=self.q_lora_rank, num_experts_per_tok=self.top_k,
                  n_routed_experts=self.experts, n_shared_experts=1, o_groups=self.groups,
                  o_lora_rank=self.o_lora_rank, layer_types=["sliding_attention"] * n, mlp_layer_types=["moe"] * n,
                  sliding_window=4096, max_position_embeddings=4096, partial_rotary_factor=0.25,
                  hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6)
        kw.update(overrides)
        cfg = DeepseekV4Config(**kw)
        cfg._attn_implementation = "eager"
        cfg._experts_implementation = "eager"
        return cfg

    def mhc_params(self) -> MhcParams:
        c = self.config()
        return MhcParams(hc_eps=c.hc_eps, norm_eps=c.rms_norm_eps, sinkhorn_iters=c.hc_sinkhorn_iters)

    def geometry(self, tp: int, verify_rows: int) -> Geometry:
        """The cycle this service runs: draft (MTP block, M-1 rows) + verify (M rows), bf16 reductions."""
        return Geometry(preset="reference", hidden=self.hidden, layers=self.layers, ranks=tp,
                        verify_rows=verify_rows, draft_rows=verify_rows - 1, draft_kind="mtp1",
                        reduce_dtype="bfloat16", mhc=self.mhc_params())
