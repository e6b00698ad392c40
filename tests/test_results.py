"""Self-describing results: the shared `run` block, statistics, per-epoch samples, CSV, and
`shell report` on replay JSON as well as gate verdicts."""

from __future__ import annotations

import csv
import io
import json
import shutil

import blake3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHIPPED_CORPUS, assert_one_line_error, run_shell

STAT_KEYS = {"n", "min", "max", "mean", "stddev", "median", "p1", "p10", "p25", "p75", "p90", "p99"}


@pytest.fixture(scope="module")
def replay_out(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay")
    r = run_shell("replay", SHIPPED_CORPUS, "--epochs", "6", "--changed", "2", "--json-out", d / "r.json",
                  "--csv", d / "r.csv", "--plot", d / "r.png", "--driver", "cpu")
    assert r.returncode == 0, r.stderr
    return d, json.loads((d / "r.json").read_text()), r


def check_run_block(run: dict, kind: str, corpus) -> None:
    assert run["schema"] == 1 and run["kind"] == kind
    assert run["tool"]["name"] == "decoder-shell" and run["tool"]["version"]
    assert run["host"]["name"] and run["host"]["python"] and run["host"]["numpy"] == np.__version__
    assert run["corpus"]["path"] == str(corpus)
    raw = (corpus / "corpus.json").read_bytes()
    own = json.loads(raw).get("digest")
    if own is None:
        assert run["corpus"] == {"path": str(corpus), "digest": blake3.blake3(raw).hexdigest(), "of": "corpus.json"}
    assert run["geometry"] == json.loads(raw)["geometry"]
    assert len(run["timestamp"]) == 20 and run["timestamp"].endswith("Z")


def test_replay_json_carries_run_block_stats_and_samples(replay_out):
    _, r, _ = replay_out
    assert r["format"] == "decoder-shell-replay" and r["schema"] == 1
    check_run_block(r["run"], "replay", SHIPPED_CORPUS)
    assert r["run"]["device"]["driver"] == "cpu" and r["run"]["device"]["runtime"] == f"numpy {np.__version__}"
    graph = [e for e in r["epochs"] if e["kind"] == "graph"]
    assert len(graph) == 6 and all(len(e["times_ms"]) == 2 for e in graph)
    cyc = np.array([max(e["times_ms"]) for e in graph])
    s = r["timing"]["cycle_ms"]
    assert set(s) == STAT_KEYS and s["n"] == 6
    assert s["min"] == cyc.min() and s["max"] == cyc.max() and s["median"] == np.median(cyc)
    assert s["mean"] == pytest.approx(cyc.mean(), rel=1e-12) and s["stddev"] == pytest.approx(cyc.std(ddof=1), rel=1e-12)
    assert s["p90"] == pytest.approx(np.percentile(cyc, 90), rel=1e-12)
    for rank, rs in enumerate(r["timing"]["per_rank_ms"]):
        assert rs["max"] == max(e["times_ms"][rank] for e in graph)


def test_csv_has_every_sample(replay_out):
    d, r, _ = replay_out
    rows = list(csv.DictReader(io.StringIO((d / "r.csv").read_text())))
    assert list(rows[0]) == ["result", "side", "kind", "epoch", "rank", "time_ms", "cycle_ms", "mismatches"]
    want = [(e["kind"], e["index"], rank, t) for e in r["epochs"] for rank, t in enumerate(e["times_ms"])]
    assert [(x["kind"], int(x["epoch"]), int(x["rank"]), float(x["time_ms"])) for x in rows] == want
    assert {x["mismatches"] for x in rows} == {"0"} and (d / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_reads_replay_json(replay_out, tmp_path):
    d, r, replay = replay_out
    rep = run_shell("report", d / "r.json", "--plot", tmp_path / "p.png", "--csv", tmp_path / "p.csv")
    assert rep.returncode == 0, rep.stderr
    assert "EXACT: 6/6 graph epochs exact, 2/2 changed epochs exact" in rep.stdout
    assert (tmp_path / "p.csv").read_text() == (d / "r.csv").read_text()
    assert (tmp_path / "p.png").stat().st_size > 1000
    bad = json.loads((d / "r.json").read_text())
    bad["epochs"][2]["mismatches"] = [0, 7]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    rb = run_shell("report", tmp_path / "bad.json")
    assert rb.returncode == 1 and "MISMATCH: 5/6 graph epochs exact" in rb.stdout
    del bad["epochs"]
    (tmp_path / "broken.json").write_text(json.dumps(bad))
    assert_one_line_error(run_shell("report", tmp_path / "broken.json"), 2, tmp_path / "broken.json")


def test_corpus_digest_recorded_in_corpus_json_is_used(tmp_path):
    """The seal corpus.json carries (docs/CORPUS.md) is the corpus digest a result names; a digest
    that does not match the content is refused, never reported."""
    c = tmp_path / "corpus"
    shutil.copytree(SHIPPED_CORPUS, c)
    info = json.loads((c / "corpus.json").read_text())
    r = run_shell("replay", c, "--epochs", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["run"]["corpus"] == {"path": str(c), "digest": info["digest"], "of": "corpus"}
    info["digest"] = "ab" * 32
    (c / "corpus.json").write_text(json.dumps(info))
    assert run_shell("replay", c, "--epochs", "1", "--json").returncode == 2


def test_verify_and_gate_share_the_run_block(tmp_path):
    v = run_shell("verify", SHIPPED_CORPUS, "--json")
    assert v.returncode == 0
    rep = json.loads(v.stdout)
    assert rep["format"] == "decoder-shell-verify" and rep["schema"] == 1
    check_run_block(rep["run"], "verify", SHIPPED_CORPUS)
    g = run_shell("gate", SHIPPED_CORPUS, "--driver", "cpu", "--candidate", "allreduce=twice", "--reps", "2",
                  "--epochs", "3", "--changed", "1", "--out", tmp_path / "v.json", "--csv", tmp_path / "v.csv")
    assert g.returncode == 5  # UNTIMED on the cpu driver
    verdict = json.loads((tmp_path / "v.json").read_text())
    check_run_block(verdict["run"], "gate", SHIPPED_CORPUS)
    assert set(verdict["timing"]["baseline"]["cycle_ms"]) == STAT_KEYS
    rows = list(csv.DictReader(io.StringIO((tmp_path / "v.csv").read_text())))
    sides = [(x["side"], x["kind"]) for x in rows if x["rank"] == "0"]
    assert sides.count(("baseline", "graph")) == 6 and sides.count(("candidate", "changed")) == 1
    assert {x["result"] for x in rows} == {"gate"}
    rr = run_shell("report", tmp_path / "v.json", "--plot", tmp_path / "v.png")
    assert rr.returncode == 5 and "UNTIMED" in rr.stdout and (tmp_path / "v.png").stat().st_size > 1000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=0, max_size=50))
def test_stats_match_numpy(values):
    from decoder_shell.replay.results import stats
    s = stats(values)
    assert set(s) == STAT_KEYS and s["n"] == len(values)
    if not values:
        assert all(v is None for k, v in s.items() if k != "n")
        return
    a = np.array(values, dtype=np.float64)
    assert s["min"] == a.min() and s["max"] == a.max() and s["median"] == np.median(a)
    assert s["min"] <= s["p1"] <= s["p10"] <= s["p25"] <= s["median"] <= s["p75"] <= s["p90"] <= s["p99"] <= s["max"]
    assert s["stddev"] == (0.0 if len(a) == 1 else pytest.approx(a.std(ddof=1), rel=1e-9, abs=1e-12))
