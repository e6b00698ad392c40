"""The fused RMSNorm collapse (geometry fused_norm) and vLLM's MTP draft (draft_kind vllm-mtp): corpus
round trip, linked cycle, exact CPU replay, and the one-line refusal of drivers without the kernels."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoder_shell.commands import ops
from decoder_shell.commands.program import build_cycle, reference
from decoder_shell.contracts import mhc
from decoder_shell.contracts.allreduce import RingContract
from decoder_shell.contracts.numerics import F32, to_bf16
from decoder_shell.contracts.rmsnorm import rmsnorm
from decoder_shell.corpus.synth import injected_values
from decoder_shell.drivers.base import require_support
from decoder_shell.errors import DriverUnavailable
from decoder_shell.geometry import Geometry

ROOT = Path(__file__).resolve().parents[1]


def _g(**kw):
    base = dict(preset="t", hidden=40, layers=1, ranks=2, verify_rows=2, draft_rows=2)
    return Geometry(**{**base, **kw})


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 3), d=st.integers(1, 70), seed=st.integers(0, 2**31))
def test_fused_pre_is_rmsnorm_of_the_unfused_collapse(m, d, seed):
    """The same streams and params: fused y = rmsnorm(unfused y, w); post and comb unchanged."""
    rng = np.random.default_rng(seed)
    streams = to_bf16(rng.standard_normal((m, 4, d)))
    fn = rng.standard_normal((24, 4 * d)).astype(F32) / np.float32(np.sqrt(4 * d))
    base, scale = rng.standard_normal(24).astype(F32), rng.uniform(0.25, 1.5, 3).astype(F32)
    w = to_bf16(1 + 0.1 * rng.standard_normal(d)).astype(F32)
    plain = mhc.mhc_pre_streams(streams, fn, base, scale)
    fused = mhc.mhc_pre_streams(streams, fn, base, scale, norm_weight=w)
    np.testing.assert_array_equal(fused["y"].view(np.uint16), rmsnorm(plain["y"], w).view(np.uint16))
    np.testing.assert_array_equal(fused["post"], plain["post"])
    np.testing.assert_array_equal(fused["comb"], plain["comb"])
    # the first target boundary is the same op on the broadcast embedding
    x = streams[:, 0, :]
    pre = mhc.mhc_pre(x, fn, base, scale, norm_weight=w)
    np.testing.assert_array_equal(pre["streams"].view(np.uint16), np.repeat(x[:, None], 4, 1).view(np.uint16))


def test_vllm_mtp_draft_takes_its_own_streams_and_links_them():
    g = _g(draft_kind="vllm-mtp", fused_norm=True)
    bounds = g.phase("draft").boundaries()
    assert [b.op for b in bounds] == ["allreduce", "mhc_pre_streams", "allreduce", "mhc_post_pre", "allreduce",
                                      "mhc_post_head"]
    cyc = build_cycle(g, RingContract())
    first, post_pre = (c for c in cyc.commands if c.boundary.phase == "draft" and c.op != "allreduce"
                       and c.op != "mhc_post_head")
    # the injected draft streams are what the next hc_post reads as its residual
    assert post_pre.inputs["residual"] == first.inputs["streams"]
    names = [s.name for s in ops.op_tensors(first.boundary, g)]
    assert names == ["streams", "fn", "base", "scale", "norm_weight", "y", "next_post", "next_comb"]
    # every hc_pre carries a norm weight, the head does not
    for c in cyc.commands:
        assert ("norm_weight" in c.inputs) == (c.op in ops.PRE_MIX)


def test_old_corpus_geometry_json_reads_as_unfused():
    d = _g().to_json()
    assert "fused_norm" not in d  # unfused geometries write the JSON they always wrote
    assert Geometry.from_json(d).fused_norm is False
    assert Geometry.from_json(_g(fused_norm=True).to_json()).fused_norm is True
    with pytest.raises(Exception, match="fused_norm"):
        Geometry.from_json({**d, "fused_norm": "yes"})


def test_drivers_without_the_kernels_refuse_in_one_line():
    cyc = build_cycle(_g(draft_kind="vllm-mtp", fused_norm=True), RingContract())
    with pytest.raises(DriverUnavailable, match="cannot run mhc_pre_streams, the fused RMSNorm collapse"):
        require_support(cyc, "level-zero", fused_norm=False, ops=("allreduce", "mhc_pre", "mhc_post_pre",
                                                                   "mhc_post_head"))
    require_support(build_cycle(_g(fused_norm=True), RingContract()), "cuda", fused_norm=True,
                    ops=("allreduce", "mhc_pre", "mhc_post_pre", "mhc_post_head"))


def test_synth_verify_replay_cli(tmp_path):
    out = tmp_path / "c"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}

    def shell(*a):
        return subprocess.run([sys.executable, "-m", "decoder_shell.cli", *a], capture_output=True, text=True,
                              env=env, timeout=300)
    r = shell("synth", "--preset", "tiny", "--tp", "3", "--verify-rows", "2", "--draft-rows", "2",
              "--draft-kind", "vllm-mtp", "--fused-norm", "--out", str(out))
    assert r.returncode == 0, r.stderr
    v = shell("verify", str(out), "--json")
    assert v.returncode == 0, v.stderr
    rep = json.loads(v.stdout)
    assert rep["parity_exact"] and rep["linked"] and rep["geometry"]["fused_norm"] is True
    r = shell("replay", str(out), "--driver", "cpu", "--epochs", "2", "--changed", "2", "--settle", "0")
    assert r.returncode == 0 and "2/2 changed epochs exact" in r.stdout, r.stdout + r.stderr
    r = shell("replay", str(out), "--driver", "level-zero", "--epochs", "1")
    assert r.returncode in (3,) and len(r.stderr.strip().splitlines()) == 1, r.stderr
