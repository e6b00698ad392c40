"""The draft's dense attention commands (wq_a, wkv, wq_b, grouped wo_a, wo_b, main_proj): the dense
contract against the scalar qlinear order, the sub-block chain in the cycle, tiny-moe-attn corpora
verified and replayed exactly (cpu, OpenCL CPU runtime), and bad input as one line and exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import assert_level_zero_replays_exact, assert_one_line_error, reseal, run_shell
from test_contracts_moe import rand_act, rand_fp8, scalar_qlinear
from decoder_shell.commands import dense_ops
from decoder_shell.commands.program import build_cycle, reference
from decoder_shell.contracts.act_qdq import QAct, act_qdq
from decoder_shell.contracts.allreduce import RingContract
from decoder_shell.contracts.dense import dense, dense_weights
from decoder_shell.contracts.numerics import to_bf16
from decoder_shell.contracts.qlinear import expand
from decoder_shell.contracts.quant import QuantInputError
from decoder_shell.corpus.store import Corpus
from decoder_shell.corpus.synth import injected_values, synth
from decoder_shell.corpus.verify import verify
from decoder_shell.errors import UsageError
from decoder_shell.geometry import ATTN_OPS, DENSE_OPS, MAIN_OPS, AttnShape, preset

FEW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                     HealthCheck.function_scoped_fixture])


def bits(a):
    return np.asarray(a).view(np.uint8)


def attn_geometry(weights="packed", tp=2, rows=5, kind="dspark"):
    return preset("tiny-moe-attn", tp=tp, verify_rows=2, draft_rows=rows, draft_kind=kind, moe_weights=weights)


@settings(max_examples=25, deadline=None)
@given(t=st.integers(1, 4), groups=st.integers(1, 3), n32=st.integers(1, 2), k32=st.integers(1, 3),
       out=st.sampled_from(["bfloat16", "float32"]), seed=st.integers(0, 2**31))
def test_dense_equals_scalar_qlinear_per_group(t, groups, n32, k32, out, seed):
    """Group g's columns are the documented scalar order over inputs [g*K, (g+1)*K) and weight g, for
    packed FP8 and expanded bf16 weights alike (same bits)."""
    rng = np.random.default_rng(seed)
    n, k = 32 * n32, 32 * k32
    ws = [rand_fp8(rng, n, k, 116, 124) for _ in range(groups)]
    a = act_qdq(rand_act(rng, t, groups * k))
    packed = dense(a, dense_weights(np.stack([w.codes for w in ws]), np.stack([w.scales for w in ws])), out)
    expanded = dense(a, dense_weights(np.stack([expand(w) for w in ws]), None), out)
    deq = a.dequant()
    ref = np.concatenate([scalar_qlinear(deq[:, g * k:(g + 1) * k], expand(ws[g])) for g in range(groups)], axis=1)
    ref = to_bf16(ref) if out == "bfloat16" else ref
    assert packed.dtype == ref.dtype and packed.shape == (t, groups * n)
    assert np.array_equal(bits(packed), bits(ref))
    assert np.array_equal(bits(expanded), bits(ref))


def test_dense_refuses_bad_operands():
    rng = np.random.default_rng(0)
    w = rand_fp8(rng, 32, 64)
    a = act_qdq(rand_act(rng, 2, 64))
    s = w.scales.copy()
    s[0, 1] = 255
    with pytest.raises(QuantInputError, match="255"):
        dense(a, dense_weights(w.codes[None], s[None]))
    with pytest.raises(QuantInputError, match="split into 3 groups"):
        dense(a, dense_weights(np.stack([w.codes] * 3), np.stack([w.scales] * 3)))
    with pytest.raises(QuantInputError, match=r"\[groups, N, K\]"):
        dense_weights(w.codes, w.scales)


def test_attention_sub_block_chain():
    g = attn_geometry()
    ops = [b.op for b in g.phase("draft").boundaries()]
    first = ops.index("main_qdq")
    assert ops[first:first + 13] == [*MAIN_OPS, *ATTN_OPS, "allreduce", "mhc_post_pre"]
    assert ops.count("attn_wo_b") == 3 and ops.count("main_proj") == 1  # every stage; main_proj stage 0 only
    assert not any(op in DENSE_OPS for op in (b.op for b in g.phase("verify").boundaries()))
    cyc = build_cycle(g, RingContract())
    draft = [c for c in cyc.commands if c.boundary.phase == "draft"]
    by_op = {}
    for c in draft:
        by_op.setdefault(c.op, []).append(c)
    # rank-local shapes of the TP2 split: wq_b heads 2 x 32, wo_a 2 groups of 32 x 32, wo_b 64 x 64
    shapes = {op: cyc.buffers[by_op[op][0].inputs["w"]].shape for op in dense_ops.LINEAR_SOURCE}
    assert shapes == {"main_proj": (1, 64, 192), "attn_wq_a": (1, 64, 64), "attn_wkv": (1, 32, 64),
                      "attn_wq_b": (1, 64, 64), "attn_wo_a": (2, 32, 32), "attn_wo_b": (1, 64, 64)}
    # the attention all-reduce reads wo_b's fp32 partial; only the core's o and the taps stay injected
    for c in draft:
        if c.op == "allreduce" and c.boundary.sub_block == "attn":
            src = cyc.buffers[c.inputs["x"]]
            assert src.boundary.op == "attn_wo_b" and src.dtype == np.float32
    injected = {(b.boundary.op, b.tensor) for b in cyc.injected() if b.kind == "input" and b.boundary.phase == "draft"}
    assert injected == {("allreduce", "x"), ("main_qdq", "x"), ("attn_o_qdq", "x")}


@FEW
@given(tp=st.sampled_from([1, 2]), rows=st.integers(1, 6), seed=st.integers(0, 1000),
       kind=st.sampled_from(["mtp1", "dspark", "vllm-mtp"]), weights=st.sampled_from(["packed", "expanded"]))
def test_cycle_dense_outputs_are_the_contract_on_their_inputs(tp, rows, seed, kind, weights):
    """Every dense command's output in the reference cycle equals the contract recomputed from the
    command's own inputs by the scalar order; replicated weights are the same on every rank, split
    ones differ."""
    g = attn_geometry(weights, tp, rows, kind)
    cyc = build_cycle(g, RingContract())
    vals = reference(cyc, injected_values(cyc, seed))
    for c in cyc.commands:
        if c.op not in dense_ops.LINEAR_SOURCE or c.boundary.layer != 0:
            continue
        groups, n, k, out = dense_ops.linear_shape(c.op, g)
        for r in range(tp):
            v = vals[r]
            w = v[c.inputs["w"]]
            wd = np.stack([expand(q) for q in dense_weights(w, v[c.inputs["s"]])]) if weights == "packed" else w
            deq = QAct(v[c.inputs["codes"]], v[c.inputs["scales"]]).dequant()
            ref = np.concatenate([scalar_qlinear(deq[:, i * k:(i + 1) * k], wd[i]) for i in range(groups)], axis=1)
            ref = to_bf16(ref) if out == "bfloat16" else ref
            assert np.array_equal(bits(v[c.outputs["y"]]), bits(ref)), (c.boundary.name, r)
        if tp == 2:
            same = np.array_equal(vals[0][c.inputs["w"]], vals[1][c.inputs["w"]])
            assert same == (c.op in dense_ops.REPLICATED), c.op


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("dense")
    out = {}
    for w in ("packed", "expanded"):
        out[w] = root / w
        synth(attn_geometry(w), out[w], seed=5, recipe_min_bytes=4096)
    return out


def test_verify_replay_exact_cpu(corpora):
    for w, path in corpora.items():
        v = run_shell("verify", path, "--json")
        assert v.returncode == 0, v.stderr
        rep = json.loads(v.stdout)
        assert rep["ok"] and rep["parity_exact"]
        assert all(rep["parity"][op]["boundaries"] == 3 for op in ATTN_OPS)
        assert rep["parity"]["main_proj"]["boundaries"] == 1
        r = run_shell("replay", path, "--driver", "cpu", "--epochs", "2", "--changed", "2", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["exact"]


@FEW
@given(tp=st.sampled_from([1, 2]), rows=st.integers(1, 5), seed=st.integers(0, 1000),
       kind=st.sampled_from(["mtp1", "dspark"]))
def test_synth_corpora_verify_exact(tmp_path_factory, tp, rows, seed, kind):
    path = tmp_path_factory.mktemp("h") / "c"
    synth(attn_geometry("packed", tp, rows, kind), path, seed=seed)
    rep = verify(Corpus.open(path))
    assert all(p["exact"] == p["boundaries"] for p in rep["parity"].values()), rep["parity"]
    assert rep["parity"]["attn_wo_b"]["boundaries"] == (3 if kind == "dspark" else 1)


def test_level_zero_replays_dense_cycles_exactly(corpora):
    """The SYCL path runs moe_qdq and dense_linear for the attention commands: every output of every
    rank bit-exact, graph and changed epochs (the changed epochs draw new o and taps), both weight forms."""
    assert_level_zero_replays_exact(corpora.values())


def test_nan_scale_byte_in_dense_weight_is_one_line_exit_2(tmp_path):
    path = tmp_path / "c"
    synth(attn_geometry(rows=2, kind="mtp1"), path, seed=1, recipe_min_bytes=1 << 30)
    c = Corpus.open(path)
    b = next(b for b in c.geometry.boundaries() if b.op == "attn_wo_a")
    m = sorted((path / "manifests" / "draft" / "r0").glob("*attn_wo_a.json"))[0]
    d = json.loads(m.read_text())
    entry = next(t for t in d["tensors"] if t["name"] == "s")
    data = np.array(c.load(c.manifest(b, 0).tensor("s")))
    data.reshape(-1)[1] = 255
    entry["digest"], _ = c.blobs.put(data.tobytes())
    m.write_text(json.dumps(d))
    reseal(path)
    assert_one_line_error(run_shell("verify", path), 2, "byte 255 (NaN)")


def test_attention_shape_off_the_grid_is_refused():
    with pytest.raises(UsageError, match="32-grid"):
        AttnShape(q_lora=48).check(64, 1)
    with pytest.raises(UsageError, match="split evenly"):
        AttnShape(heads=4, head_dim=32, o_groups=4, o_rank=32, q_lora=64, kv=32).check(64, 3)
    with pytest.raises(UsageError, match="input width must be on the 32-grid"):
        AttnShape(heads=2, head_dim=48, o_groups=2, o_rank=32, q_lora=64, kv=32).check(64, 1)
    assert_one_line_error(run_shell("synth", "--preset", "tiny-moe-attn", "--tp", "3", "--out", "/nonexistent/x"), 2)


def test_cycle_forms_without_dense_nodes_refuse_in_one_line():
    """The cuda driver's persistent cycle forms hold no MoE or dense nodes: refused by name."""
    from decoder_shell.drivers.base import refuse_moe
    cyc = build_cycle(attn_geometry(), RingContract())
    cyc.commands = [c for c in cyc.commands if c.op in DENSE_OPS]  # past the MoE check, to the dense one
    with pytest.raises(UsageError, match="dense attention commands"):
        refuse_moe(cyc, "cuda (persistent cycle)")


def test_corpus_with_an_off_grid_attention_shape_is_one_line_exit_2(tmp_path):
    """A corpus.json whose attention widths leave the 32-grid (sealed as a writer would have): refused
    before anything is built."""
    path = tmp_path / "c"
    synth(attn_geometry(tp=1, rows=1, kind="mtp1"), path, seed=4)
    meta = path / "corpus.json"
    d = json.loads(meta.read_text())
    d["geometry"]["attn"]["q_lora"] = 48
    from decoder_shell.corpus.store import seal
    d["digest"] = seal(d)  # the manifests are unchanged; only the seal of the edited document
    meta.write_text(json.dumps(d))
    assert_one_line_error(run_shell("verify", path), 2, "32-grid")
