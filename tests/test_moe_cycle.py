"""MoE draft phases in the cycle: synth, verify, inspect, replay and gate on real corpora (cpu driver),
weights carried as recipes, and bad quantized input as one line and exit 2."""

from __future__ import annotations

import json
import numpy as np
import pytest

from conftest import assert_level_zero_replays_exact, assert_one_line_error, reseal, run_shell
from decoder_shell.commands.program import build_cycle
from decoder_shell.contracts.allreduce import RingContract
from decoder_shell.corpus.bind import bind
from decoder_shell.corpus.store import Corpus
from decoder_shell.corpus.synth import synth
from decoder_shell.geometry import MOE_CHAINS, preset
from decoder_shell.replay.compare import mismatches


def moe_geometry(weights="packed", tp=2, rows=5, kind="dspark", combine="fused"):
    """The fused combine mode (the official one: tests/test_moe_official.py)."""
    return preset("tiny-moe", tp=tp, verify_rows=2, draft_rows=rows, draft_kind=kind, moe_weights=weights,
                  moe_combine=combine)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    out = {}
    for w in ("packed", "expanded"):
        out[w] = root / w
        synth(moe_geometry(w), out[w], seed=3, recipe_min_bytes=4096)
    return out


def test_draft_phase_runs_the_moe_chain():
    g = moe_geometry()
    ops = [b.op for b in g.phase("draft").boundaries()]
    ffn = ops.index("moe_qdq")
    assert ops[ffn:ffn + 7] == [*MOE_CHAINS["fused"], "mhc_post_pre"]
    assert ops.count("moe_routed") == 3 and ops[-1] == "mhc_post_head"
    assert "moe_qdq" not in [b.op for b in g.phase("verify").boundaries()]
    cyc = build_cycle(g, RingContract())
    # the FFN all-reduce reads the combine's output: no injected partial sum left in a MoE sub-block
    injected = {(b.boundary.op, b.tensor) for b in cyc.injected() if b.boundary.phase == "draft"}
    assert ("allreduce", "x") in injected  # embedding and attention partials stay injected
    ffn_reduce = [c for c in cyc.commands if c.boundary.phase == "draft" and c.op == "allreduce"
                  and c.boundary.sub_block == "ffn"]
    assert all(cyc.buffers[c.inputs["x"]].boundary.op == "moe_combine" for c in ffn_reduce)


def test_verify_inspect_replay_exact(corpora):
    for w, path in corpora.items():
        v = run_shell("verify", path, "--json")
        assert v.returncode == 0, v.stderr
        rep = json.loads(v.stdout)
        assert rep["ok"] and rep["parity_exact"]
        assert all(rep["parity"][op]["boundaries"] == 3 for op in MOE_CHAINS["fused"] if op != "allreduce")  # one per DSpark stage
        i = json.loads(run_shell("inspect", path, "--json").stdout)
        assert i["recipe_tensors"] > 0 and i["missing_blobs"] == 0
        r = run_shell("replay", path, "--driver", "cpu", "--epochs", "2", "--changed", "2", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["exact"]


def test_packed_and_expanded_corpora_route_and_sum_alike(corpora):
    """Same seed: the expanded corpus holds the packed weights decoded once, so the first MoE
    sub-block (whose inputs and other params are the same in both) gives bit-identical outputs on
    every rank, through its all-reduce. (Later mHC params are drawn per buffer and differ.)"""
    vals = {}
    for w, path in corpora.items():
        c = Corpus.open(path)
        cyc = build_cycle(c.geometry, c.info.contract())
        b = bind(c, cyc)
        vals[w] = {f"{cmd.boundary.name}.{n}.r{r}": b.captured[r][bid] for cmd in cyc.commands[:10]
                   for n, bid in cmd.outputs.items() for r in range(cyc.ranks)}
    assert vals["packed"].keys() == vals["expanded"].keys()
    assert sum(".moe_" in k for k in vals["packed"]) == 7 * 2  # 7 outputs of the 5 commands, 2 ranks
    assert "draft.0009.allreduce.out.r1" in vals["packed"]
    diff = [k for k in vals["packed"] if mismatches(vals["packed"][k], vals["expanded"][k])]
    assert diff == []
    slots = [v for k, v in vals["packed"].items() if k.endswith("moe_routed.slots")]
    assert all(np.count_nonzero(s) > 0.9 * s.size for s in slots)


def test_recipe_tensor_is_regenerated_and_digest_checked(corpora, tmp_path):
    import shutil
    path = tmp_path / "c"
    shutil.copytree(corpora["packed"], path)
    m = sorted((path / "manifests" / "draft" / "r1").glob("*moe_routed.json"))[0]
    d = json.loads(m.read_text())
    entry = next(t for t in d["tensors"] if "recipe" in t and t["name"] == "w13")
    entry["recipe"]["seed"][-1] += 1
    m.write_text(json.dumps(d))
    reseal(path)  # sealed as a writer of this recipe would have: the recipe check behind the seal is tested
    res = run_shell("verify", path)
    assert_one_line_error(res, 2, "recipe generates do not match its digest")


def test_nan_scale_byte_is_one_line_exit_2(tmp_path):
    """A captured scale byte 255 in a routed expert's scales: verify refuses it, naming the reason."""
    path = tmp_path / "c"
    synth(moe_geometry(rows=2, kind="mtp1"), path, seed=1, recipe_min_bytes=1 << 30)
    c = Corpus.open(path)
    m = sorted((path / "manifests" / "draft" / "r0").glob("*moe_routed.json"))[0]
    d = json.loads(m.read_text())
    entry = next(t for t in d["tensors"] if t["name"] == "s2")
    data = np.array(c.load(c.manifest(next(b for b in c.geometry.boundaries() if b.op == "moe_routed"), 0)
                           .tensor("s2")))
    data.reshape(-1)[5] = 255
    entry["digest"], _ = c.blobs.put(data.tobytes())
    m.write_text(json.dumps(d))
    reseal(path)
    res = run_shell("verify", path)
    assert_one_line_error(res, 2, "byte 255 (NaN)")


def test_out_of_range_expert_id_is_one_line_exit_2(tmp_path):
    """A captured expert id outside [0, E) (the gate's output and every command reading it, so the
    corpus stays linked): verify refuses it in one line, exit 2."""
    path = tmp_path / "c"
    synth(moe_geometry(rows=2, kind="mtp1"), path, seed=2, recipe_min_bytes=1 << 30)
    c = Corpus.open(path)
    b = next(b for b in c.geometry.boundaries() if b.op == "moe_routed")
    ids = np.array(c.load(c.manifest(b, 1).tensor("ids")))
    old = c.manifest(b, 1).tensor("ids").digest
    ids[1, 2] = 8  # tiny-moe has experts 0..7
    new, _ = c.blobs.put(ids.tobytes())
    for m in (path / "manifests" / "draft" / "r1").glob("*moe_*.json"):
        m.write_text(m.read_text().replace(old, new))
    reseal(path)
    assert_one_line_error(run_shell("verify", path), 2, "expert id out of range")


def test_bad_moe_geometry_is_one_line_exit_2(tmp_path):
    res = run_shell("synth", "--preset", "tiny-moe", "--tp", "3", "--out", tmp_path / "c")
    assert_one_line_error(res, 2, "must split into 32-groups over 3 ranks")
    res = run_shell("synth", "--preset", "tiny", "--moe-weights", "expanded", "--out", tmp_path / "d")
    assert_one_line_error(res, 2, "applies to the MoE presets")


def test_gate_selects_moe_commands(corpora, tmp_path):
    """`moe` selects the five MoE commands of every stage; the cpu gate runs them exactly (twice) and
    as a deletion bound, and says its host times give no time verdict."""
    for args, exactness in ((["--candidate", "moe=twice"], "exact"), (["--delete", "moe_routed"], None)):
        out = tmp_path / "v.json"
        res = run_shell("gate", corpora["packed"], "--driver", "cpu", *args, "--epochs", "1", "--changed", "1",
                        "--reps", "1", "--out", out)
        assert res.stderr == ""
        v = json.loads(out.read_text())
        assert v["verdict"] == "UNTIMED" and v["timing_meaningful"] is False
        if exactness:
            assert v["exactness_verdict"] == exactness
        assert v["changes"][0]["commands"] == (15 if args[1].startswith("moe=") else 3)


def test_level_zero_replays_moe_cycles_exactly(corpora):
    """The SYCL path of the level-zero driver runs the MoE SPIR-V kernels in the cycle: every output of
    every rank bit-exact, graph and changed epochs, packed and expanded weights."""
    assert_level_zero_replays_exact(corpora.values())


def test_drivers_without_moe_commands_refuse():
    from decoder_shell.drivers.base import refuse_moe
    from decoder_shell.errors import UsageError
    refuse_moe(build_cycle(preset("tiny", tp=2), RingContract()), "cuda")  # no MoE: nothing to refuse
    with pytest.raises(UsageError, match="does not replay the MoE draft commands"):
        refuse_moe(build_cycle(moe_geometry(), RingContract()), "cuda")
