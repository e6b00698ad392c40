"""dsv4-flash acceptance: the real geometry (hidden 4096, 43 layers) at TP4, verify M=2, draft M=1.

Slow-marked (synth writes ~140 MiB) but part of the default run: about 20 s on 2 cores."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from decoder_shell.corpus.store import Corpus
from decoder_shell.drivers import get_driver
from decoder_shell.replay.engine import Checker, load_inputs, prepare

from conftest import run_shell

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def flash(tmp_path_factory):
    out = tmp_path_factory.mktemp("flash") / "corpus"
    res = run_shell("synth", "--preset", "dsv4-flash", "--tp", "4", "--verify-rows", "2", "--draft-rows", "1",
                    "--out", out)
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture(scope="module")
def flash_verify(flash):
    res = run_shell("verify", flash, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_verify_phase_has_87_reductions_and_85_post_pre_boundaries(flash_verify):
    v = flash_verify["phases"]["verify"]
    assert v["reductions"] == 87 and v["post_pre"] == 85
    assert v["pre"] == 1 and v["head"] == 1 and v["rows"] == 2
    assert v["boundaries"] == 87 + 85 + 2
    d = flash_verify["phases"]["draft"]
    assert d["reductions"] == 3 and d["post_pre"] == 1 and d["rows"] == 1


def test_flash_corpus_is_linked_cross_rank_exact_and_exact(flash_verify):
    rep = flash_verify
    assert rep["ok"] and rep["linked"] and rep["cross_rank_exact"] and rep["parity_exact"]
    assert rep["geometry"]["hidden"] == 4096 and rep["geometry"]["layers"] == 43 and rep["geometry"]["ranks"] == 4
    assert rep["parity"]["allreduce"]["boundaries"] == 90
    assert rep["parity"]["mhc_post_pre"]["boundaries"] == 86


def test_replicated_mhc_params_are_stored_once(flash):
    res = run_shell("inspect", flash, "--json")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["dedup_ratio"] > 1
    assert rep["unique_blobs"] < rep["tensor_refs"] / 4
    assert rep["missing_blobs"] == 0 and rep["unreferenced_blobs"] == 0

    # straight from the manifests: each mHC boundary's params name one digest on all 4 ranks
    fn_refs, per_boundary, param_bytes = 0, defaultdict(set), {}
    for p in (flash / "manifests").glob("*/r*/*.json"):
        m = json.loads(p.read_text())
        for t in m["tensors"]:
            if t["role"] == "param":
                per_boundary[(m["phase"], m["index"], t["name"])].add(t["digest"])
                param_bytes[t["digest"]] = int(np.prod(t["shape"])) * 4
                fn_refs += t["name"] == "fn"
    assert all(len(ds) == 1 for ds in per_boundary.values())
    fns = {next(iter(ds)) for (phase, idx, name), ds in per_boundary.items() if name == "fn"}
    assert fn_refs == 4 * 90 and len(fns) == 90
    # param bytes: referenced once per rank, stored once
    assert rep["bytes_per_role"]["param"] == 4 * sum(param_bytes.values())
    files = {q.name[:-4] for q in (flash / "blobs").glob("*/*.zst")}
    assert fns <= files and len(files) == rep["unique_blobs"]


def test_one_cpu_cycle_of_the_flash_corpus_runs_exact(flash):
    corpus = Corpus.open(flash)
    cycle, bound = prepare(corpus)
    assert len(cycle.commands) == 180
    with get_driver("cpu").load(cycle) as s:
        load_inputs(s, bound.injected)
        s.poison()
        times = s.run()
        per_rank, by_op = Checker(cycle).check(s, bound.captured)
    assert len(times) == 4
    assert per_rank == [0, 0, 0, 0] and by_op == {}
