"""Replay on the cpu driver: the shipped corpus, changed epochs, poisoning, mismatch reporting,
JSON and plot output, driver errors."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from decoder_shell.commands.program import build_cycle, reference
from decoder_shell.corpus.store import Corpus
from decoder_shell.commands.values import changed_inputs
from decoder_shell.corpus.synth import synth
from decoder_shell.drivers import get_driver
from decoder_shell.drivers.base import POISON
from decoder_shell.geometry import preset
from decoder_shell.replay.engine import Checker, load_inputs, prepare, replay

from conftest import SHIPPED_CORPUS, assert_one_line_error, reseal, run_shell


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


# --- the shipped corpus ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shipped_replay():
    res = run_shell("replay", SHIPPED_CORPUS, "--driver", "cpu", "--epochs", "70", "--changed", "5", "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_shipped_corpus_replays_70_of_70_exact_with_changed_epochs(shipped_replay):
    r = shipped_replay
    assert r["exact"] is True
    assert r["summary"] == {"graph": {"epochs": 70, "exact": 70}, "changed": {"epochs": 5, "exact": 5}}
    assert r["expected"] == "captured"
    kinds = [e["kind"] for e in r["epochs"]]
    assert kinds == ["graph"] * 70 + ["changed"] * 5
    assert all(e["mismatches"] == [0] * r["geometry"]["ranks"] and e["by_op"] == {} for e in r["epochs"])


def test_replay_json_structure(shipped_replay):
    r = shipped_replay
    assert {"corpus", "driver", "geometry", "expected", "commands_per_rank", "timing_meaningful", "settle_epochs",
            "exact", "timing", "summary", "epochs"} <= set(r)
    corpus = Corpus.open(SHIPPED_CORPUS)
    assert r["geometry"] == corpus.geometry.to_json()
    assert r["commands_per_rank"] == len(corpus.geometry.boundaries())
    assert r["driver"].startswith("cpu") and r["timing_meaningful"] is False
    assert r["timing_note"] == "host numpy times, not device times"
    assert r["settle_epochs"] == 3
    ranks = r["geometry"]["ranks"]
    for i, e in enumerate(r["epochs"]):
        assert set(e) == {"kind", "index", "times_ms", "cycle_ms", "mismatches", "by_op"}
        assert e["index"] == (i if e["kind"] == "graph" else i - 70)
        assert len(e["times_ms"]) == ranks and len(e["mismatches"]) == ranks
        assert all(t > 0 for t in e["times_ms"])
        assert e["cycle_ms"] == max(e["times_ms"])
    t = r["timing"]
    graph = [e["cycle_ms"] for e in r["epochs"] if e["kind"] == "graph"]
    assert t["cycle_ms"]["median"] == pytest.approx(float(np.median(graph)))
    assert t["cycle_ms"]["p10"] <= t["cycle_ms"]["median"] <= t["cycle_ms"]["p90"]
    assert len(t["per_rank_ms"]) == ranks


def test_json_out_writes_the_file_and_still_prints_the_table(tmp_path):
    out = tmp_path / "r.json"
    res = run_shell("replay", SHIPPED_CORPUS, "--driver", "cpu", "--epochs", "3", "--json-out", out)
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())["summary"]["graph"] == {"epochs": 3, "exact": 3}
    assert "EXACT: 3/3 graph epochs exact" in res.stdout
    assert "slowest rank" in res.stdout


def test_human_output(tmp_path):
    res = run_shell("replay", SHIPPED_CORPUS, "--driver", "cpu", "--epochs", "4", "--changed", "2")
    assert res.returncode == 0 and res.stderr == ""
    assert "EXACT: 4/4 graph epochs exact, 2/2 changed epochs exact" in res.stdout
    assert "host numpy times, not device times" in res.stdout


def test_plot_writes_a_png(tmp_path):
    png = tmp_path / "epochs.png"
    res = run_shell("replay", SHIPPED_CORPUS, "--driver", "cpu", "--epochs", "6", "--plot", png)
    assert res.returncode == 0, res.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image
    img = matplotlib.image.imread(png)
    assert img.shape[0] > 100 and img.shape[1] > 100
    assert img.std() > 0  # not a blank image


# --- changed epochs ----------------------------------------------------------------------------
def test_changed_epochs_really_change_inputs_and_expected_outputs():
    corpus = Corpus.open(SHIPPED_CORPUS)
    cycle, bound = prepare(corpus)
    inputs = [b for b in cycle.injected() if b.kind == "input"]
    assert inputs
    for k in range(3):
        new = changed_inputs(cycle, seed=0, epoch=k)
        for r in range(cycle.ranks):
            assert set(new[r]) == {b.id for b in inputs}
            for b in inputs:
                assert (bits(new[r][b.id]) != bits(bound.injected[r][b.id])).any()
        want = reference(cycle, [{**bound.injected[r], **new[r]} for r in range(cycle.ranks)])
        for r in range(cycle.ranks):
            for b in cycle.outputs():
                assert (bits(want[r][b.id]) != bits(bound.captured[r][b.id])).any(), b.name
    # deterministic in (seed, epoch); a different epoch gives other values
    a, b2 = changed_inputs(cycle, 0, 1), changed_inputs(cycle, 0, 1)
    c = changed_inputs(cycle, 0, 2)
    bid = inputs[0].id
    assert (bits(a[0][bid]) == bits(b2[0][bid])).all() and (bits(a[0][bid]) != bits(c[0][bid])).any()


def test_replay_in_process_every_rank_holds_identical_collective_outputs():
    corpus = Corpus.open(SHIPPED_CORPUS)
    cycle, bound = prepare(corpus)
    with get_driver("cpu").load(cycle) as s:
        load_inputs(s, bound.injected)
        s.poison()
        s.run()
        for cmd in cycle.commands:
            if cmd.op == "allreduce":
                outs = [bits(s.read(r, cmd.outputs["out"])) for r in range(cycle.ranks)]
                assert all((o == outs[0]).all() for o in outs[1:])
        per_rank, by_op = Checker(cycle).check(s, bound.captured)
        assert per_rank == [0] * cycle.ranks and by_op == {}


# --- poisoning ---------------------------------------------------------------------------------
def cone(cycle, idx: int) -> set:
    """Output buffers that depend on command idx's outputs (including them)."""
    dep = set(cycle.commands[idx].outputs.values())
    for cmd in cycle.commands[idx + 1:]:
        if dep & set(cmd.inputs.values()):
            dep |= set(cmd.outputs.values())
    return dep


def mismatching_buffers(session, cycle, expected):
    bad = {}
    for r in range(cycle.ranks):
        for b in cycle.outputs():
            n = int(np.count_nonzero(bits(session.read(r, b.id)) != bits(expected[r][b.id])))
            if n:
                bad[(r, b.id)] = n
    return bad


def _deletable(cycle):
    """A spread of commands: each phase's first collective, first mHC, a middle one and its last."""
    picks = set()
    for phase in {c.boundary.phase for c in cycle.commands}:
        idx = [c.index for c in cycle.commands if c.boundary.phase == phase]
        picks |= {idx[0], idx[1], idx[len(idx) // 2], idx[-1]}
    return sorted(picks)


@pytest.mark.parametrize("pick", range(8))
def test_poison_catches_a_deleted_command(pick):
    corpus = Corpus.open(SHIPPED_CORPUS)
    cycle, bound = prepare(corpus)
    picks = _deletable(cycle)
    if pick >= len(picks):
        pytest.skip("fewer distinct commands in this cycle")
    idx = picks[pick]
    cmd = cycle.commands[idx]
    with get_driver("cpu").load(cycle, variants={idx: "delete"}) as s:
        load_inputs(s, bound.injected)
        # the outputs hold the right values from an earlier epoch: only the poison can reveal the gap
        for r in range(cycle.ranks):
            for bid in cmd.outputs.values():
                s.write(r, bid, bound.captured[r][bid])
        s.poison()
        for r in range(cycle.ranks):
            for b in cycle.outputs():
                v = s.read(r, b.id)
                assert (bits(v) == POISON[v.dtype.itemsize]).all()
        s.run()
        bad = mismatching_buffers(s, cycle, bound.captured)
        per_rank, by_op = Checker(cycle).check(s, bound.captured)

    deleted = set(cmd.outputs.values())
    # every element of every output of the deleted command, on every rank, is reported
    for r in range(cycle.ranks):
        for bid in deleted:
            assert bad.get((r, bid)) == int(np.prod(cycle.buffers[bid].shape))
    # and nothing outside what depends on it
    assert {bid for _, bid in bad} <= cone(cycle, idx)
    assert cmd.op in by_op
    assert sum(per_rank) == sum(bad.values())
    if idx == len(cycle.commands) - 1 or cone(cycle, idx) == deleted:
        assert {bid for _, bid in bad} == deleted
        assert set(by_op) == {cmd.op}


def test_without_poison_a_deleted_command_would_pass():
    """The control for the test above: stale correct outputs and no poison compare equal, which is
    exactly the failure poisoning exists to prevent."""
    corpus = Corpus.open(SHIPPED_CORPUS)
    cycle, bound = prepare(corpus)
    idx = len(cycle.commands) - 1
    with get_driver("cpu").load(cycle, variants={idx: "delete"}) as s:
        load_inputs(s, bound.injected)
        for r in range(cycle.ranks):
            for bid in cycle.commands[idx].outputs.values():
                s.write(r, bid, bound.captured[r][bid])
        s.run()
        per_rank, _ = Checker(cycle).check(s, bound.captured)
    assert per_rank == [0] * cycle.ranks


# --- a corpus whose captured outputs disagree with the contracts --------------------------------
def _tamper_head_output(root: Path, rank: int) -> str:
    """Flip one bit of the final head output `y` on one rank: stored as a valid, new blob (nothing
    consumes it, so the corpus stays linked)."""
    corpus = Corpus.open(root)
    b = corpus.geometry.boundaries()[-1]
    assert b.op == "mhc_post_head"
    path = root / "manifests" / b.phase / f"r{rank}" / f"{b.index:04d}-{b.op}.json"
    m = json.loads(path.read_text())
    t = next(t for t in m["tensors"] if t["name"] == "y")
    y = corpus.load(corpus.manifest(b, rank).tensor("y")).copy()
    y.view(np.uint16)[0, 0] ^= 1
    t["digest"], _ = corpus.blobs.put(y.tobytes())
    path.write_text(json.dumps(m))
    reseal(root)
    return b.name


def test_inexact_capture_fails_replay_with_exit_1(corpus_copy):
    _tamper_head_output(corpus_copy, rank=1)
    res = run_shell("replay", corpus_copy, "--driver", "cpu", "--epochs", "3", "--json")
    line = assert_one_line_error(res, 1)
    assert "not exact" in line
    r = json.loads(res.stdout)
    assert r["exact"] is False
    assert r["summary"]["graph"] == {"epochs": 3, "exact": 0}
    # settle epochs are untimed, but an inexact one is still reported
    assert [e["kind"] for e in r["epochs"]] == ["settle"] * 3 + ["graph"] * 3
    for e in r["epochs"]:
        assert e["mismatches"] == [0, 1] and e["by_op"] == {"mhc_post_head": 1}

    human = run_shell("replay", corpus_copy, "--driver", "cpu", "--epochs", "2", "--settle", "0")
    assert human.returncode == 1
    assert "MISMATCH" in human.stdout and "mhc_post_head=2" in human.stdout


def test_verify_reports_parity_and_record_rebases(corpus_copy):
    _tamper_head_output(corpus_copy, rank=0)
    v = run_shell("verify", corpus_copy, "--json")
    assert v.returncode == 0, v.stderr  # linked and cross-rank exact: usable, but not exact
    rep = json.loads(v.stdout)
    assert rep["ok"] and rep["linked"] and rep["cross_rank_exact"] and not rep["parity_exact"]
    head = rep["parity"]["mhc_post_head"]
    assert head["mismatched_elements"] == 1 and head["exact"] == head["boundaries"] - 1
    assert head["max_ulp"] == 1
    assert all(p["mismatched_elements"] == 0 for op, p in rep["parity"].items() if op != "mhc_post_head")

    rec = run_shell("verify", corpus_copy, "--record")
    assert rec.returncode == 0, rec.stderr
    assert json.loads((corpus_copy / "corpus.json").read_text())["rebased"] is True
    res = run_shell("replay", corpus_copy, "--driver", "cpu", "--epochs", "3", "--json")
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout)
    assert r["expected"] == "rebased" and r["exact"] is True


# --- other geometries --------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(tp=3, verify_rows=3, draft_rows=0, reduce_dtype="float32"),
                                dict(tp=5, verify_rows=1, draft_rows=4, draft_kind="dspark"),
                                dict(tp=1, verify_rows=8, draft_rows=2),
                                dict(tp=8, verify_rows=2, draft_rows=1)],
                         ids=["tp3-fp32-nodraft", "tp5-dspark", "tp1-m8", "tp8"])
def test_synthesized_geometries_replay_exact(tmp_path, kw):
    g = preset("tiny", **kw)
    corpus = synth(g, tmp_path / "c", seed=11)
    result = replay(corpus, get_driver("cpu"), epochs=2, changed=2, settle=1)
    assert result.exact
    assert len(result.of("graph")) == 2 and len(result.of("changed")) == 2
    assert result.commands_per_rank == len(build_cycle(g, corpus.info.contract()).commands)


def test_replay_restores_captured_inputs_and_is_repeatable():
    corpus = Corpus.open(SHIPPED_CORPUS)
    a = replay(corpus, get_driver("cpu"), epochs=2, changed=1, settle=0)
    b = replay(corpus, get_driver("cpu"), epochs=2, changed=1, settle=0)
    assert a.exact and b.exact
    assert [e.mismatches for e in a.epochs] == [e.mismatches for e in b.epochs]


# --- drivers -----------------------------------------------------------------------------------
def test_unknown_driver_is_exit_2():
    line = assert_one_line_error(run_shell("replay", SHIPPED_CORPUS, "--driver", "tpu", "--epochs", "1"), 2)
    assert "tpu" in line and "cpu" in line


def _has_nvidia_gpu() -> bool:
    return any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidiactl")) or bool(shutil.which("nvidia-smi"))


@pytest.mark.skipif(_has_nvidia_gpu(), reason="this machine has an NVIDIA GPU")
def test_cuda_driver_without_a_gpu_is_exit_3():
    line = assert_one_line_error(run_shell("replay", SHIPPED_CORPUS, "--driver", "cuda", "--epochs", "1"), 3)
    assert "cuda" in line


@pytest.mark.skipif(_has_nvidia_gpu(), reason="this machine has an NVIDIA GPU")
def test_cuda_one_process_per_rank_without_a_gpu_is_exit_3():
    line = assert_one_line_error(run_shell("replay", SHIPPED_CORPUS, "--driver", "cuda", "--placement", "processes",
                                           "--epochs", "1"), 3)
    assert "cuda" in line


@pytest.mark.parametrize("driver", ["cpu", "level-zero"])
def test_placement_is_a_cuda_option(driver):
    line = assert_one_line_error(run_shell("replay", SHIPPED_CORPUS, "--driver", driver, "--placement", "processes",
                                           "--epochs", "1"), 2)
    assert "--placement" in line and "cuda" in line


@pytest.mark.skipif(_has_nvidia_gpu(), reason="this machine has an NVIDIA GPU")
def test_auto_driver_falls_back_to_cpu():
    res = run_shell("replay", SHIPPED_CORPUS, "--epochs", "1", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["driver"].startswith("cpu")


@pytest.mark.parametrize("args", [["--epochs", "0"], ["--changed", "-1"], ["--settle", "-2"]])
def test_bad_replay_counts_are_exit_2(args):
    assert_one_line_error(run_shell("replay", SHIPPED_CORPUS, "--driver", "cpu", *args), 2)


def test_replay_of_a_missing_folder_is_exit_2(tmp_path):
    missing = tmp_path / "nowhere"
    assert_one_line_error(run_shell("replay", missing, "--driver", "cpu", "--epochs", "1"), 2, missing)


def test_default_corpus_is_the_one_in_the_working_folder(tmp_path):
    shutil.copytree(SHIPPED_CORPUS, tmp_path / "corpus")
    res = run_shell("replay", "--driver", "cpu", "--epochs", "2", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["corpus"] == "corpus"


@pytest.mark.skipif(_has_nvidia_gpu(), reason="this machine has an NVIDIA GPU")
def test_rank_processes_report_a_worker_failure_in_one_line_and_leave_no_process():
    """One process per rank: every worker fails to open CUDA here; the parent must raise the workers'
    one-line error with its exit code (3: no device) and leave no worker running, never hang."""
    from decoder_shell.drivers.cuda.processes import ProcessSession
    from decoder_shell.errors import ShellError
    cyc = build_cycle(preset("tiny", tp=2, verify_rows=2), Corpus.open(SHIPPED_CORPUS).info.contract())
    with pytest.raises(ShellError) as err:
        ProcessSession([0, 0], cyc, None)
    msg = str(err.value)
    assert err.value.exit_code == 3 and "\n" not in msg
    assert msg.startswith("rank ") and "cuda" in msg
    import multiprocessing
    assert multiprocessing.active_children() == []


def test_self_check_reports_every_case_as_it_finishes():
    """self_check's progress callback (tools/cuda_check.py prints a line a case from it) follows each random
    case with the elements it compared and its mismatches, which add up to the summary's totals."""
    from decoder_shell.replay.selfcheck import self_check
    seen = []
    summary = self_check(get_driver("cpu"), 3, 7, variants=False, progress=lambda *a: seen.append(a))
    assert [c for c, _, _ in seen] == [0, 1, 2]
    assert all(n > 0 for _, n, _ in seen)
    assert sum(n for _, n, _ in seen) == summary["elements_compared"]
    assert sum(b for _, _, b in seen) == summary["mismatching_elements"] == 0
