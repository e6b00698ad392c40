"""The reference model's size: the small default, or DeepSeek-V4-Flash's (`--preset dsv4-flash`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

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
    sliding_window: int = 4096
    rotary_dims: int = 8  # qk_rope_head_dim (partial rotary: rotary_dims / head_dim)
    preset: str = "reference"

    @classmethod
    def named(cls, preset: str, layers: int = 0, routed_experts: int = 0) -> "ModelShape":
        """`reference` (the small default) or `dsv4-flash`: DeepSeek-V4-Flash's hidden size, layer
        count, hc, attention shapes (64 heads of 512, q_lora 1024, 8 output groups of o_lora 1024,
        rope dims 64, sliding window 128) and expert width 2048, top-6 routing over `routed_experts`
        (default 8; the real 256 would not fit one GPU with four ranks). The vocabulary stays 256
        (the prompt's bytes are its tokens): it is outside the captured cycle."""
        if preset == "reference":
            base = cls()
        elif preset == "dsv4-flash":
            base = cls(hidden=4096, layers=43, heads=64, head_dim=512, groups=8, experts=8, top_k=6,
                       moe_intermediate=2048, q_lora_rank=1024, o_lora_rank=1024, sliding_window=128,
                       rotary_dims=64, preset="dsv4-flash")
        else:
            raise UsageError(f"--preset must be 'reference' or 'dsv4-flash', not {preset!r}")
        if layers < 0 or layers > 128:
            raise UsageError("--layers must be between 1 and 128")
        if routed_experts < 0 or routed_experts > 256:
            raise UsageError("--routed-experts must be between 1 and 256")
        n = routed_experts or base.experts
        return replace(base, layers=layers or base.layers, experts=n, top_k=min(base.top_k, n))

    @property
    def large(self) -> bool:
        """Built rank-locally on its device (no full-model initialisation on the host)."""
        return self.preset != "reference"

    def check_tp(self, tp: int) -> None:
        sizes = {"vocab": self.vocab, "heads": self.heads, "output groups": self.groups,
                 "experts": self.experts, "shared-expert width": self.moe_intermediate, "2*hidden": 2 * self.hidden}
        bad = [k for k, v in sizes.items() if v % tp]
        if tp < 1 or bad:
            what = ", ".join(f"{k} ({sizes[k]})" for k in bad) or "sizes"
            hint = "use 1, 2, 4 or 8" + (" and --routed-experts a multiple of it" if "experts" in bad else "")
            raise UsageError(f"--tp {tp} does not divide the {self.preset} model's {what}; {hint}")

    def config(self, layers: int | None = None, **overrides):
        """The transformers DeepseekV4Config of this shape (imports transformers)."""
        from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config
        n = self.layers if layers is None else layers
        kw = dict(vocab_size=self.vocab, hidden_size=self.hidden, moe_intermediate_size=self.moe_intermediate,
                  num_hidden_layers=n, num_attention_heads=self.heads, num_key_value_heads=1,
                  head_dim=self.head_dim, q_lora_rank=self.q_lora_rank, num_experts_per_tok=self.top_k,
                  n_routed_experts=self.experts, n_shared_experts=1, o_groups=self.groups,
                  o_lora_rank=self.o_lora_rank, layer_types=["sliding_attention"] * n, mlp_layer_types=["moe"] * n,
                  sliding_window=self.sliding_window, max_position_embeddings=4096,
                  partial_rotary_factor=self.rotary_dims / self.head_dim,
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
        name = self.preset if self.preset == "reference" or self.layers == 43 else "reference"
        return Geometry(preset=name, hidden=self.hidden, layers=self.layers, ranks=tp,
                        verify_rows=verify_rows, draft_rows=verify_rows - 1, draft_kind="mtp1",
                        reduce_dtype="bfloat16", mhc=self.mhc_params())
