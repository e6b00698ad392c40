"""`shell gate` and `shell report` end to end: the real CLI in subprocesses, on the shipped corpus."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "corpus"
MHC_OPS = {"mhc_pre", "mhc_post_pre", "mhc_post_head"}
FAST = ["--reps", "2", "--epochs", "4", "--changed", "2", "--settle", "1"]


def shell(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "decoder_shell.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd or REPO, timeout=300)


def gate(tmp: Path, name: str, *args, corpus=CORPUS):
    """Run a cpu gate writing its verdict; returns (process, verdict dict)."""
    out = tmp / f"{name}.json"
    p = shell("gate", corpus, "--driver", "cpu", *FAST, "--out", out, *args)
    assert "Traceback" not in p.stderr, p.stderr
    return p, json.loads(out.read_text())


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("gate")


@pytest.fixture(scope="module")
def inexact(tmp):
    return gate(tmp, "numpy-exp", "--candidate", "verify:mhc=numpy-exp", "--plot", tmp / "numpy-exp.png")


def test_inexact_candidate_fails_with_counts_per_rank_and_op(inexact):
    p, v = inexact
    assert p.returncode == 1
    assert v["verdict"] == "FAIL" and v["exactness_verdict"] == "MISMATCH" and v["exactness"]["required"]
    assert v["exactness"]["baseline"]["exact"]
    cand = v["exactness"]["candidate"]
    for kind, epochs in (("graph", 8), ("changed", 2)):
        k = cand[kind]
        assert k["epochs"] == epochs and k["exact"] == 0
        assert all(n > 0 for n in k["per_rank"])
        assert set(k["by_op"]) <= MHC_OPS and k["by_op"]
        # per-op counts add up to the per-rank counts
        assert [sum(c[r] for c in k["by_op"].values()) for r in range(2)] == k["per_rank"]
    # only the verify phase was swapped: the first mismatch is there
    assert cand["first"].split()[2].startswith("verify.")
    # the same captured inputs give the same mismatch count in every graph epoch
    graph = [e for e in v["epochs"]["candidate"] if e["kind"] == "graph"]
    assert len({tuple(e["mismatches"]) for e in graph}) == 1
    assert "candidate is not exact" in p.stdout and "FAIL" in p.stdout
    assert "mhc_post_pre" in p.stdout and "MISMATCH" in p.stdout


def test_exact_but_slower_candidate_is_exact_and_untimed_on_cpu(tmp):
    p, v = gate(tmp, "twice", "--candidate", "mhc=twice", "--candidate", "collectives=twice")
    assert p.returncode == 5  # UNTIMED has its own exit code
    assert v["exactness_verdict"] == "exact" and v["exactness"]["candidate"]["exact"]
    assert v["exactness"]["candidate"]["graph"]["exact"] == 8
    assert v["timing_meaningful"] is False
    assert v["timing_note"] == "host numpy times, not device times"
    assert v["time_verdict"] == "not meaningful" and v["verdict"] == "UNTIMED"
    assert [c["commands"] for c in v["changes"]] == [8, 8]
    assert "UNTIMED" in p.stdout and "not meaningful" in p.stdout


def test_saved_times_come_from_the_epoch_times(inexact):
    _, v = inexact
    reps, per = v["settings"]["reps"], v["settings"]["epochs"]
    med = {}
    for side in ("baseline", "candidate"):
        graph = [e for e in v["epochs"][side] if e["kind"] == "graph"]
        assert len(graph) == reps * per
        cycle = [max(e["times_ms"]) for e in graph]
        reps_ms = [float(np.median(cycle[i * per:(i + 1) * per])) for i in range(reps)]
        assert v["timing"][side]["reps_ms"] == pytest.approx(reps_ms)
        med[side] = (float(np.median(cycle)), reps_ms)
    assert v["saved_ms"]["median"] == pytest.approx(med["baseline"][0] - med["candidate"][0])
    assert v["saved_ms"]["conservative"] == pytest.approx(min(med["baseline"][1]) - max(med["candidate"][1]))


def test_fp32_accumulate_is_exact_at_two_ranks_and_inexact_at_four(tmp):
    # At R=2 one fp32 addition rounded once equals the hop ring's single rounding; at R>=3 it does not.
    p2, v2 = gate(tmp, "fp32-tp2", "--candidate", "collectives=fp32-accumulate")
    assert v2["exactness"]["candidate"]["exact"], p2.stdout
    tp4 = tmp / "tp4"
    assert shell("synth", "--tp", "4", "--out", tp4).returncode == 0
    p4, v4 = gate(tmp, "fp32-tp4", "--candidate", "collectives=fp32-accumulate", corpus=tp4)
    assert p4.returncode == 1 and v4["exactness_verdict"] == "MISMATCH"
    graph = v4["exactness"]["candidate"]["graph"]
    assert len(graph["per_rank"]) == 4 and all(n > 0 for n in graph["per_rank"])
    assert graph["by_op"]["allreduce"][0] > 0
    # every rank holds identical all-reduce bits, so every rank mismatches the same elements
    assert len(set(graph["by_op"]["allreduce"])) == 1


def test_deletion_bound_reports_saving_and_marks_exactness_not_required(tmp):
    p, v = gate(tmp, "delete", "--delete", "mhc")
    assert v["mode"] == "bound" and not v["exactness"]["required"]
    assert v["exactness_verdict"] == "not required"
    assert all(n > 0 for n in v["exactness"]["candidate"]["graph"]["per_rank"])  # reported all the same
    assert v["saved_ms"]["median"] > 0  # running no mHC at all is faster than running it
    assert "deletion-only upper bound" in p.stdout and "not required" in p.stdout
    assert "candidate is not exact" not in " ".join(v["reasons"])


def test_copy_bound_writes_expected_outputs_and_stays_exact(tmp):
    p, v = gate(tmp, "copy", "--delete", "verify:mhc_post_pre", "--delete-mode", "copy")
    assert v["mode"] == "bound" and v["changes"][0]["impl"] == "copy"
    assert v["changes"][0]["boundaries"] == ["verify.0003.mhc_post_pre", "verify.0005.mhc_post_pre",
                                             "verify.0007.mhc_post_pre"]
    # copied outputs are the expected ones, also for the changed epochs' new values
    assert v["exactness"]["candidate"]["exact"] and v["exactness"]["candidate"]["changed"]["exact"] == 2


def test_report_rerenders_a_saved_verdict(inexact, tmp):
    p, v = inexact
    png = tmp / "numpy-exp.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = shell("report", tmp / "numpy-exp.json", "--plot", tmp / "again.png")
    assert r.returncode == p.returncode == 1, r.stderr
    assert (tmp / "again.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    last = [ln for ln in p.stdout.splitlines() if ln.startswith("FAIL")]
    assert last and last[0] in r.stdout.splitlines()
    j = shell("report", tmp / "numpy-exp.json", "--json")
    assert json.loads(j.stdout) == v


def test_list_candidates_shows_what_the_driver_offers():
    p = shell("gate", "--list-candidates", "--driver", "cpu", "--json")
    assert p.returncode == 0
    names = set(json.loads(p.stdout)["variants"])
    assert names == {"delete", "copy", "twice", "fp32-accumulate", "numpy-exp", "fused"}
    t = shell("gate", "--list-candidates", "--driver", "cpu")
    assert t.returncode == 0 and all(n in t.stdout for n in names) and "(ops: allreduce)" in t.stdout


def test_kernel_candidate_is_parsed_then_refused_by_the_cpu_driver():
    spec = REPO / "examples" / "one-shot-allreduce" / "spec.json"
    p = shell("gate", CORPUS, "--driver", "cpu", "--candidate", f"collectives=@{spec}")
    assert p.returncode == 2 and p.stderr.strip() == "shell gate: cpu driver cannot run kernel candidates " \
                                                      "(use --driver cuda or level-zero)"
    # the spec is checked against the selection before any driver sees it
    p = shell("gate", CORPUS, "--driver", "cpu", "--candidate", f"mhc=@{spec}")
    assert p.returncode == 2 and "kernel is for allreduce" in p.stderr


BAD_GATE = [
    ([], "nothing to gate"),
    (["--candidate", "mhc"], "expected OP=IMPL"),
    (["--candidate", "attention=twice"], "expected an op"),
    (["--candidate", "prefill:mhc=twice"], "no phase 'prefill'"),
    (["--candidate", "verify.0042.mhc_pre=twice"], "no boundary"),
    (["--candidate", "mhc=fused-m2"], "no implementation 'fused-m2'"),
    (["--candidate", "mhc=fp32-accumulate"], "applies to allreduce"),
    (["--candidate", "verify:mhc=twice", "--delete", "verify.0003.mhc_post_pre"], "selected twice"),
    (["--candidate", "mhc=@missing-spec.json"], "no such candidate spec"),
    (["--delete", "mhc", "--epochs", "0"], "--epochs must be at least 1"),
    (["--delete", "mhc", "--threshold-ms", "nan"], "--threshold-ms"),
]


@pytest.mark.parametrize("args,msg", BAD_GATE, ids=[m for _, m in BAD_GATE])
def test_bad_gate_input_is_one_line_and_exit_2(args, msg):
    p = shell("gate", CORPUS, "--driver", "cpu", *args)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and msg in p.stderr and p.stderr.startswith("shell gate:")


def test_missing_corpus_is_exit_2(tmp):
    p = shell("gate", tmp / "nope", "--driver", "cpu", "--delete", "mhc")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a CUDA GPU may be present here")
def test_unavailable_driver_is_exit_3():
    p = shell("gate", CORPUS, "--driver", "cuda", "--delete", "mhc")
    assert p.returncode == 3 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_bad_verdict_files_are_one_line_and_exit_2(inexact, tmp):
    good = json.loads((tmp / "numpy-exp.json").read_text())
    cases = {"missing.json": None, "notjson.json": "{oops", "other.json": json.dumps({"format": "x"}),
             "schema.json": json.dumps({**good, "schema": 99}),
             "truncated.json": json.dumps({k: v for k, v in good.items() if k != "timing"}),
             "badtiming.json": json.dumps({**good, "timing": {"baseline": {}}})}
    for name, text in cases.items():
        if text is not None:
            (tmp / name).write_text(text)
        p = shell("report", tmp / name)
        assert p.returncode == 2, (name, p.stdout, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and name in p.stderr and "Traceback" not in p.stderr


def test_phase_selection_swaps_only_that_phase(tmp):
    # phases share no buffers, so the mismatches of all mHC commands are those of each phase's, added
    one = ["--reps", "1", "--epochs", "1", "--changed", "0", "--settle", "0"]
    counts = {}
    for sel in ("mhc", "verify:mhc", "draft:mhc"):
        p = shell("gate", CORPUS, "--driver", "cpu", *one, "--candidate", f"{sel}=numpy-exp", "--json")
        assert p.returncode == 1, p.stderr
        counts[sel] = json.loads(p.stdout)["exactness"]["candidate"]["graph"]["per_rank"]
    assert all(n > 0 for n in counts["verify:mhc"] + counts["draft:mhc"])
    assert counts["mhc"] == [a + b for a, b in zip(counts["verify:mhc"], counts["draft:mhc"])]
