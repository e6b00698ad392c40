"""`shell replay --breakdown`: time per node, per op kind and per phase; all-reduce size, algbw and
busbw as nccl-tests defines them (S / t, and algbw x 2(n-1)/n)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHIPPED_CORPUS, assert_one_line_error, run_shell


@pytest.fixture(scope="module")
def broken_down():
    r = run_shell("replay", SHIPPED_CORPUS, "--driver", "cpu", "--epochs", "2", "--breakdown", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_breakdown_json_covers_every_command(broken_down):
    b, g = broken_down["breakdown"], broken_down["geometry"]
    assert [n["command"] for n in b["nodes"]] == list(range(broken_down["commands_per_rank"]))
    kinds = {"allreduce": "all-reduce", "mhc_pre": "mHC pre", "mhc_post_pre": "mHC post/pre", "mhc_post_head": "head"}
    assert all(kinds[n["node"]] == n["kind"] for n in b["nodes"])
    assert b["kinds"]["all-reduce"]["nodes"] == 8 and b["kinds"]["head"]["nodes"] == 2
    assert b["total_ms"] == pytest.approx(sum(n["ms"] for n in b["nodes"]))
    for phase in ("draft", "verify"):
        assert b["phases"][phase]["total"] == pytest.approx(sum(n["ms"] for n in b["nodes"] if n["phase"] == phase))
    assert all(e["kind"] != "profiled" for e in broken_down["epochs"])  # the profiled epoch was exact
    rows = {"draft": g["draft_rows"], "verify": g["verify_rows"]}
    for a in b["collectives"]:
        phase = a["boundary"].split(".")[0]
        assert a["bytes"] == rows[phase] * g["hidden"] * 2  # bf16 [M, D] of one rank
        assert a["algbw_GBps"] == pytest.approx(a["bytes"] / (a["ms"] * 1e-3) / 1e9)
        assert a["busbw_GBps"] == pytest.approx(a["algbw_GBps"] * 2 * (g["ranks"] - 1) / g["ranks"])


def test_breakdown_tables():
    r = run_shell("replay", SHIPPED_CORPUS, "--driver", "cpu", "--epochs", "2", "--breakdown")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "time per op kind and phase, ms (one profiled epoch: cpu driver" in out
    for kind in ("all-reduce", "mHC pre", "mHC post/pre", "head"):
        assert f"│ {kind} " in out
    assert "busbw = algbw x 1.000, as nccl-tests" in out and "0.0002 MiB" in out
    assert "time per node" not in out
    v = run_shell("replay", SHIPPED_CORPUS, "--driver", "cpu", "--epochs", "1", "--breakdown", "-v")
    assert "time per node, ms (in launch order)" in v.stdout and "verify.0009.mhc_post_head" in v.stdout


def test_breakdown_where_a_driver_cannot_time_nodes(tmp_path):
    try:
        import dpctl  # noqa: F401
    except ImportError:
        pytest.skip("the level-zero driver (dpctl) is not installed")
    r = run_shell("replay", SHIPPED_CORPUS, "--driver", "level-zero", "--epochs", "1", "--breakdown")
    if r.returncode == 3:
        pytest.skip(f"level-zero driver unavailable: {r.stderr.strip()}")
    assert_one_line_error(r, 2, "--breakdown")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=1e-4, max_value=50.0), min_size=16, max_size=16),
       st.integers(min_value=1, max_value=8))
def test_breakdown_sums_and_bandwidth(times, ranks):
    from decoder_shell.commands.program import build_cycle
    from decoder_shell.contracts.allreduce import RingContract
    from decoder_shell.geometry import preset
    from decoder_shell.replay.breakdown import build_breakdown
    cyc = build_cycle(preset("tiny", tp=ranks), RingContract())
    nodes = [(c.index, c.op, t) for c, t in zip(cyc.commands, times)]
    nodes.append((cyc.commands[1].index, "sinkhorn_kernel", 0.5))
    b = build_breakdown(cyc, nodes, "test")
    assert b["kinds"]["Sinkhorn node"] == {"nodes": 1, "ms": 0.5}
    assert sum(k["ms"] for k in b["kinds"].values()) == pytest.approx(b["total_ms"])
    assert sum(p["total"] for p in b["phases"].values()) == pytest.approx(b["total_ms"])
    for a in b["collectives"]:
        assert a["busbw_GBps"] == pytest.approx(a["algbw_GBps"] * (2 * (ranks - 1) / ranks))


@pytest.mark.gpu
def test_cuda_breakdown_times_every_kernel():
    from decoder_shell.drivers import get_driver
    from decoder_shell.errors import DriverUnavailable
    try:
        get_driver("cuda")
    except DriverUnavailable as e:
        pytest.skip(f"no CUDA GPU here: {e}")
    r = subprocess.run([sys.executable, "-m", "decoder_shell.cli", "replay", str(SHIPPED_CORPUS), "--driver", "cuda",
                        "--placement", "emulated", "--epochs", "5", "--breakdown", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    b = res["breakdown"]
    assert b["how"].startswith("cuda driver")
    assert {n["command"] for n in b["nodes"]} == set(range(res["commands_per_rank"]))
    assert all(n["ms"] > 0 for n in b["nodes"])
