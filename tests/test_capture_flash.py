"""`shell serve-reference --preset dsv4-flash`: DeepSeek-V4-Flash's shapes built rank-locally on the
device, captured through the real CLI (at 1 layer on the CPU here; the 43-layer TP4 run on a GPU is
tools/gpu_capture_flash.sh), and the cuda path refused in one line where there is no GPU."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decoder_shell.capture.reference.model import RankModel
from decoder_shell.capture.reference.shape import ModelShape
from decoder_shell.corpus.store import Corpus
from decoder_shell.errors import UsageError
from test_capture_service import SHELL, Service, capture, replay_exact, shell


def test_flash_shape_is_the_real_attention_geometry():
    s = ModelShape.named("dsv4-flash")
    c = s.config()
    assert (c.hidden_size, c.num_hidden_layers, c.hc_mult) == (4096, 43, 4)
    assert (c.num_attention_heads, c.head_dim, c.q_lora_rank, c.o_groups, c.o_lora_rank) == (64, 512, 1024, 8, 1024)
    assert (c.qk_rope_head_dim, c.sliding_window, c.moe_intermediate_size) == (64, 128, 2048)
    g = s.geometry(4, 2)
    assert (g.preset, g.hidden, g.layers) == ("dsv4-flash", 4096, 43)
    verify = [b for b in g.boundaries() if b.phase == "verify"]
    assert sum(b.op == "allreduce" for b in verify) == 87  # DESIGN.md: 87 reductions,
    assert sum(b.op == "mhc_post_pre" for b in verify) == 85  # 85 post/pre boundaries per verify pass
    assert ModelShape.named("dsv4-flash", routed_experts=4).top_k == 4
    with pytest.raises(UsageError, match="routed-experts"):
        ModelShape.named("dsv4-flash", routed_experts=6).check_tp(4)


def _tiny_large(layers=1) -> ModelShape:
    """The rank-local (meta, then on-device) build at the small size: same code path, fast."""
    return replace(ModelShape(), preset="dsv4-flash", layers=layers)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), tp=st.sampled_from([2, 4]))
def test_seeded_init_replicates_what_tp_replicates_and_is_deterministic(seed, tp):
    shape = _tiny_large()
    ranks = [dict(RankModel(shape, r, tp, seed).named_parameters()) for r in range(tp)]
    again = dict(RankModel(shape, 0, tp, seed).named_parameters())
    for name, p in ranks[0].items():
        assert torch.equal(p, again[name]), name  # same seed, same bits
        assert torch.isfinite(p.float()).all(), name
        split = any(k in name for k in ("embed.weight", "draft_input.weight", "q_b_proj", "o_a_proj",
                                        "o_b_proj", "mlp.experts", "mlp.shared")) and name != "draft_embed.weight"
        same = all(torch.equal(p, r[name]) for r in ranks[1:])
        if split and p.numel() > 16:
            assert not same, f"{name} is a rank's slice but every rank drew the same bits"
        elif not split:
            assert same, f"{name} is replicated but differs across ranks"
    for name, b in RankModel(shape, 0, tp, seed).named_buffers():
        assert torch.isfinite(b).all(), name


def test_flash_service_capture_through_the_cli_replays_exact(tmp_path):
    svc = Service(tmp_path, 2, "transformers", "--preset", "dsv4-flash", "--layers", "1", "--routed-experts", "2",
                  "--device", "cpu")
    try:
        g = svc.health["geometry"]
        assert (g["hidden"], g["layers"], g["ranks"], g["verify_rows"]) == (4096, 1, 2, 2)
        assert "hidden 4096, layers 1," in svc.log.read_text()
        out = tmp_path / "flash"
        r, summary = capture(svc, out)
        assert r.returncode == 0, r.stderr + r.stdout[-2000:]
        c = summary["corpora"][0]
        assert c["linked"] and c["cross_rank_exact"] and c["allreduce_exact"]
    finally:
        svc.stop()
    corpus = Corpus.open(out)
    assert corpus.info.geometry.hidden == 4096
    r = shell("verify", out, "--infer", "--json")
    assert r.returncode == 0, r.stderr + r.stdout[-2000:]
    manifests = json.loads(shell("inspect", out, "--json").stdout)["manifests"]
    assert manifests == 2 * len(corpus.info.geometry.boundaries())
    replay_exact(out)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the refusal is for hosts without one")
def test_cuda_device_without_a_gpu_is_refused_in_one_line():
    r = subprocess.run([*SHELL, "serve-reference", "--preset", "dsv4-flash", "--tp", "4", "--device", "cuda",
                        "--port", "0"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device cuda needs a CUDA GPU" in lines[0], r.stderr


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 9), past=st.integers(0, 300), window=st.sampled_from([0, 1, 4, 128]))
def test_causal_mask_is_transformers_sliding_window_mask(rows, past, window):
    """The engine's mask hides what transformers' own (sliding) causal mask function hides."""
    from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function

    from decoder_shell.capture.reference.engine import causal_mask
    allowed = sliding_window_causal_mask_function(window) if window else causal_mask_function
    m = causal_mask(rows, past, torch.float32, window=window)[0, 0]
    q = torch.arange(rows).unsqueeze(1) + past
    k = torch.arange(past + rows).unsqueeze(0)
    zero = torch.tensor(0)
    want = allowed(zero, zero, q, k).expand(rows, past + rows)
    assert torch.equal(m == 0, want)
    assert torch.equal(m != 0, ~want) and (m[~want] == torch.finfo(torch.float32).min).all()


@pytest.mark.parametrize("args, says", [
    (["--layers", "0"], "--layers must be at least 1"),
    (["--routed-experts", "6", "--tp", "4"], "--routed-experts a multiple of it"),
    (["--preset", "dsv4-flash", "--tp", "3"], "--tp 3 does not divide the dsv4-flash model's"),
])
def test_bad_flash_options_are_one_line_and_exit_2(args, says):
    r = subprocess.run([*SHELL, "serve-reference", "--preset", "dsv4-flash", "--port", "0", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr


@given(eps=st.floats(min_value=1e-12, max_value=1e-2, allow_nan=False))
@settings(max_examples=25, deadline=None)
def test_the_shell_mhc_reads_the_norm_epsilon_of_the_installed_transformers(eps):
    """transformers 5.25 renamed the unweighted RMSNorm's `eps` to `variance_epsilon`; the shell's mHC (the reference
    service's `--mhc shell`) reads whichever the installed release has, and the value the module was built with."""
    from types import SimpleNamespace
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4UnweightedRMSNorm
    from decoder_shell.capture.reference.mhc_shell import _norm_eps
    assert _norm_eps(DeepseekV4UnweightedRMSNorm(eps=eps)) == eps
    assert _norm_eps(SimpleNamespace(eps=eps)) == eps  # (the attribute of the releases before 5.25)
