"""The `shell` command line: synth, verify, inspect; errors are one line and an exit code."""

from __future__ import annotations

import json

import pytest

from conftest import SHIPPED_CORPUS, assert_one_line_error, run_shell


def test_help_lists_the_subcommands():
    res = run_shell("--help")
    assert res.returncode == 0
    for sub in ("synth", "verify", "inspect", "replay"):
        assert sub in res.stdout


def test_synth_verify_inspect_round_trip(tmp_path):
    out = tmp_path / "c"
    s = run_shell("synth", "--preset", "tiny", "--tp", "3", "--verify-rows", "4", "--draft-rows", "2",
                  "--seed", "9", "--out", out)
    assert s.returncode == 0 and s.stderr == ""
    assert s.stdout.startswith(f"wrote {out}:") and "manifests" in s.stdout
    info = json.loads((out / "corpus.json").read_text())
    assert info["geometry"]["ranks"] == 3 and info["geometry"]["verify_rows"] == 4
    assert info["source"]["kind"] == "synth" and info["source"]["seed"] == 9
    assert info["format"] == "decoder-shell-corpus" and info["schema"] == 1

    v = run_shell("verify", out)
    assert v.returncode == 0 and v.stderr == ""
    for text in ("linked: yes", "cross-rank exact: yes", "parity: exact", "integrity: ok"):
        assert text in v.stdout

    i = run_shell("inspect", out)
    assert i.returncode == 0
    assert "dedup ratio" in i.stdout and "unique blobs" in i.stdout


def test_verify_json(tiny_corpus):
    res = run_shell("verify", tiny_corpus, "--json")
    assert res.returncode == 0
    rep = json.loads(res.stdout)
    assert rep["ok"] and rep["linked"] and rep["cross_rank_exact"] and rep["parity_exact"]
    assert rep["integrity"] == "ok" and rep["broken_links"] == [] and rep["cross_rank_mismatch"] == []
    # tiny: 2 layers -> verify has 4 sub-blocks: 5 reductions, 3 post/pre; mtp1 draft: 3 and 1
    assert rep["phases"]["verify"] == {"rows": 2, "boundaries": 10, "reductions": 5, "post_pre": 3, "pre": 1,
                                       "head": 1}
    assert rep["phases"]["draft"] == {"rows": 1, "boundaries": 6, "reductions": 3, "post_pre": 1, "pre": 1,
                                      "head": 1}
    assert rep["parity"]["allreduce"]["boundaries"] == 8
    assert all(p["exact"] == p["boundaries"] and p["max_ulp"] == 0 for p in rep["parity"].values())
    assert rep["contract"].startswith("ring(")


@pytest.mark.parametrize("args", [["--reduce-dtype", "float32", "--draft-rows", "0"],
                                  ["--draft-kind", "dspark", "--tp", "1"]])
def test_synth_variants_verify(tmp_path, args):
    out = tmp_path / "c"
    assert run_shell("synth", *args, "--out", out).returncode == 0
    rep = json.loads(run_shell("verify", out, "--json").stdout)
    assert rep["ok"] and rep["parity_exact"]
    if "--draft-rows" in args:
        assert set(rep["phases"]) == {"verify"}
    else:
        assert rep["phases"]["draft"]["reductions"] == 7  # 3 stages x (attention + MoE) + input


def test_verify_record_keeps_an_exact_corpus_unrebased(corpus_copy):
    assert run_shell("verify", corpus_copy, "--record").returncode == 0
    info = json.loads((corpus_copy / "corpus.json").read_text())
    assert info["rebased"] is False
    assert info["parity"]["how"] == "verify"
    assert set(info["parity"]["ops"]) == {"allreduce", "mhc_pre", "mhc_post_pre", "mhc_post_head"}


@pytest.mark.parametrize("args,needle", [
    (["--tp", "0"], "--tp"),
    (["--tp", "65"], "--tp"),
    (["--verify-rows", "0"], "--verify-rows"),
    (["--draft-rows", "-1"], "--draft-rows"),
])
def test_synth_bad_geometry_is_one_line(tmp_path, args, needle):
    line = assert_one_line_error(run_shell("synth", *args, "--out", tmp_path / "c"), 2)
    assert needle in line


def test_synth_refuses_a_folder_holding_another_geometry(tmp_path):
    out = tmp_path / "c"
    assert run_shell("synth", "--tp", "2", "--out", out).returncode == 0
    assert_one_line_error(run_shell("synth", "--tp", "4", "--out", out), 2, out)


@pytest.mark.parametrize("cmd", ["verify", "inspect"])
def test_missing_corpus_is_one_line(tmp_path, cmd):
    missing = tmp_path / "none"
    assert_one_line_error(run_shell(cmd, missing), 2, missing)


@pytest.mark.parametrize("cmd", ["verify", "inspect"])
def test_folder_without_corpus_json_is_one_line(tmp_path, cmd):
    assert_one_line_error(run_shell(cmd, tmp_path), 2, tmp_path / "corpus.json")


def test_inspect_json_of_the_shipped_corpus():
    res = run_shell("inspect", SHIPPED_CORPUS, "--json")
    assert res.returncode == 0
    rep = json.loads(res.stdout)
    assert rep["manifests"] == sum(rep["manifests_per_op"].values())
    assert rep["missing_blobs"] == 0 and rep["unreferenced_blobs"] == 0
    assert rep["unique_blobs"] < rep["tensor_refs"]
    assert sum(rep["bytes_per_role"].values()) == rep["referenced_bytes"]
    assert rep["compression_ratio"] > 0


def test_shipped_corpus_verifies():
    res = run_shell("verify", SHIPPED_CORPUS, "--json")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["ok"] and rep["parity_exact"]


def test_unknown_subcommand_is_a_usage_error():
    res = run_shell("frobnicate")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
