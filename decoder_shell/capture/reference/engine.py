"""The reference engine: prefill, then fixed-geometry draft + verify cycles with greedy acceptance.

Every rank runs the same steps (rank 0 broadcasts each request), so cycles line up across ranks.
A cycle: the draft block proposes M-1 tokens from the last accepted token and the target's last
hidden state (one pass over M-1 rows: the anchor row and M-2 mask rows); the target verifies the
M rows [last, proposals...] against its KV cache; the longest agreeing prefix is accepted plus the
target's own next token, and the cache is cut back to what was accepted.
"""

from __future__ import annotations

import time

import torch

from ... import capture
from .model import RankModel

MASK_TOKEN = 0


class KVCache:
    """Shared-KV cache (K == V in DeepSeek-V4) with a cut-back for rejected draft tokens."""

    def __init__(self):
        self.kv: dict[int, torch.Tensor] = {}

    def update(self, k, v, layer_idx, *args, **kwargs):
        prev = self.kv.get(layer_idx)
        full = k if prev is None else torch.cat([prev, k], dim=2)
        self.kv[layer_idx] = full
        return full, full

    def crop(self, length: int) -> None:
        for i, t in self.kv.items():
            self.kv[i] = t[:, :, :length]


def causal_mask(rows: int, past: int, dtype, device=None, window: int = 0) -> torch.Tensor:
    """[1, 1, rows, past+rows]: row i (position past+i) sees positions <= past+i (and, with a sliding
    `window`, only the last `window` of them, as transformers' sliding layers do)."""
    q = torch.arange(rows, device=device).unsqueeze(1) + past
    k = torch.arange(past + rows, device=device).unsqueeze(0)
    m = torch.zeros(rows, past + rows, dtype=dtype, device=device)
    hidden = (k > q) | (k <= q - window) if window else k > q
    m.masked_fill_(hidden, torch.finfo(dtype).min)
    return m[None, None]


class Engine:
    def __init__(self, model: RankModel, verify_rows: int):
        self.m = model
        self.rows = verify_rows
        self.hc = model.shape.config().hc_mult
        self.device = next(model.parameters()).device

    @torch.no_grad()
    def target(self, ids: torch.Tensor, start: int, cache: KVCache):
        """Target pass over ids [T] at positions start..: (next-token ids [T], final hidden [T, D])."""
        m = self.m
        x = m.embed(ids[None])
        return self._blocks(x, list(m.layers), m.hc_head, m.norm, ids, start, cache, start)

    @torch.no_grad()
    def draft(self, last: int, hidden: torch.Tensor, start: int) -> list[int]:
        """M-1 proposals from one pass of the draft block (its own rows only, no cache)."""
        m = self.m
        n = self.rows - 1
        tokens = torch.tensor([last] + [MASK_TOKEN] * (n - 1), device=self.device)
        x = m.draft_input(m.draft_embed(tokens)[None], hidden.expand(n, -1)[None])
        nxt, _ = self._blocks(x, [m.draft_layer], m.draft_head, m.draft_norm, tokens, start, None, 0)
        return nxt.tolist()

    def _blocks(self, x, layers, head, norm, ids, start, cache, past):
        rows = x.shape[1]
        pos = torch.arange(start, start + rows, device=self.device)[None]
        emb = {"main": self.m.rotary(x, position_ids=pos, layer_type="main"),
               "compress": self.m.rotary(x, position_ids=pos, layer_type="compress")}
        mask = causal_mask(rows, past, x.dtype, self.device, self.m.shape.sliding_window)
        streams = x.unsqueeze(2).expand(-1, -1, self.hc, -1).contiguous()
        for layer in layers:
            streams = layer(streams, position_embeddings=emb, position_ids=pos, attention_mask=mask,
                            past_key_values=cache, input_ids=ids[None])
        hidden = norm(head(streams))[0]
        logits = self.m.lm_head(hidden)
        return logits.float().argmax(-1).cpu(), hidden

    def generate(self, prompt: list[int], max_new_tokens: int) -> dict:
        t0 = time.perf_counter()
        cache = KVCache()
        nxt, hidden = self.target(torch.tensor(prompt, device=self.device), 0, cache)
        out = [int(nxt[-1])]
        last, h, pos = out[0], hidden[-1:], len(prompt)
        cycles = accepted = 0
        while len(out) < max_new_tokens:
            with capture.cycle():
                if self.rows > 1:
                    with capture.phase("draft"):
                        proposals = self.draft(last, h, pos)
                else:
                    proposals = []
                with capture.phase("verify"):
                    nxt, hidden = self.target(torch.tensor([last] + proposals, device=self.device), pos, cache)
            k = 0
            while k < len(proposals) and proposals[k] == int(nxt[k]):
                k += 1
            new = proposals[:k] + [int(nxt[k])]
            cycles += 1
            accepted += k
            pos += k + 1
            cache.crop(pos)
            out.extend(new)
            last, h = new[-1], hidden[k:k + 1]
        return {"tokens": out[:max_new_tokens], "cycles": cycles, "accepted_drafts": accepted,
                "seconds": time.perf_counter() - t0}
