"""tools/bench_draft.py on the CPU: its argument handling and exit codes, and its core (a draft-only
session, exactness on every epoch, per-stage grouping by command op) run on the cpu driver; the
grouping of replay/breakdown.py for any op a draft phase holds."""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO
from decoder_shell.corpus.store import Corpus
from decoder_shell.corpus.synth import synth
from decoder_shell.drivers import get_driver
from decoder_shell.errors import ShellError, UsageError
from decoder_shell.geometry import DRAFT_KINDS, preset
from decoder_shell.replay.breakdown import command_kind, median_nodes, stage_table
from decoder_shell.replay.engine import expected_outputs, prepare

sys.path.insert(0, str(REPO / "tools"))
import bench_draft  # noqa: E402

TOOL = REPO / "tools" / "bench_draft.py"


def run_tool(*args):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=120)


def has_gpu() -> bool:
    try:
        get_driver("cuda")
    except ShellError:
        return False
    return True


@pytest.mark.skipif(has_gpu(), reason="a CUDA device is present: the tool would run the benchmark")
def test_without_a_gpu_one_line_exit_3():
    r = run_tool("--rows", "5")
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 3 and len(lines) == 1 and "cuda" in lines[0] and "Traceback" not in r.stderr
    assert r.stdout == ""  # refused before any host work (no synth)


@pytest.mark.parametrize("args,says", [
    (["--rows", "0"], "--rows"), (["--rows", "2000"], "--rows"), (["--epochs", "0"], "--epochs"),
    (["--profiles", "0"], "--profiles"), (["--warmup", "-1"], "--warmup"), (["--rows", "x"], "invalid int"),
    (["--forms", "fast"], "invalid choice"), (["--corpus", "/nonexistent/c"], "/nonexistent/c"),
])
def test_bad_arguments_one_line_exit_2(args, says):
    r = run_tool(*args)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and says in lines[0], r.stderr


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    out = {}
    for kind in ("dspark", "mtp1"):
        g = preset("tiny-moe", tp=2, verify_rows=2, draft_rows=5, draft_kind=kind)
        out[kind] = synth(g, tmp_path_factory.mktemp(kind) / "c", seed=2).root
    return out


def bind(root):
    c = Corpus.open(root)
    cyc, b = prepare(c)
    return cyc, b, expected_outputs(cyc, b.injected, b.captured, c.info.rebased)


@pytest.mark.parametrize("kind", ["dspark", "mtp1"])
def test_draft_session_on_the_cpu_driver(corpora, kind):
    cyc, b, want = bind(corpora[kind])
    args = bench_draft.parse(["--epochs", "2", "--profiles", "3", "--warmup", "1", "--no-torch"])
    res = bench_draft.bench_session(get_driver("cpu"), cyc, b, want, "packed", args)
    draft = [c for c in cyc.commands if c.boundary.phase == "draft"]
    n_out = sum(int(np.prod(cyc.buffers[o].shape))
                for c in draft for o in c.outputs.values())
    assert res["mismatching"] == 0 and res["elements"] == (2 + 3) * cyc.ranks * n_out
    st_ = res["stages"]
    assert sorted(st_["stages"]) == list(range(DRAFT_KINDS[kind]))
    # the kinds are the draft's command ops (all-reduces by dtype), nothing from a list
    assert st_["kinds"] == list(dict.fromkeys(command_kind(cyc, c.index) for c in draft))
    assert {"allreduce float32", "allreduce bfloat16", "moe_routed"} <= set(st_["kinds"])
    # the cpu driver times one node per command: every draft command counted once, in its stage
    assert sum(k["commands"] for s in st_["stages"].values() for k in s["kinds"].values()) == len(draft)
    assert st_["total_ms"] == pytest.approx(sum(n["ms"] for n in res["nodes"]))
    assert all(cyc.commands[n["command"]].boundary.phase == "draft" for n in res["nodes"])  # verify deleted
    assert res["phase_ms"]["min"] <= res["phase_ms"]["median"] <= res["phase_ms"]["max"]
    res["shell_qdq_routed_stage0_ms_per_rank"] = bench_draft.shell_routed_ms(cyc, res)
    out = {"gpu": "cpu", "arch": "-", "seconds": 0.0, "cases": [{"T": 5, "forms": {"packed": res}, "memory": {
        "ranks": [], "note": ""}}]}
    bench_draft.report(out, _Quiet(), lambda m, c: None)


class _Quiet:
    def print(self, *a, **k):
        pass


def test_a_wrong_output_is_counted(corpora):
    cyc, b, want = bind(corpora["dspark"])
    routed = next(c for c in cyc.commands if c.op == "moe_routed" and c.boundary.layer == 2)
    bid = routed.outputs["slots"]
    want[1][bid] = want[1][bid].copy()
    want[1][bid].reshape(-1).view(np.uint32)[7] ^= 1
    args = bench_draft.parse(["--epochs", "1", "--profiles", "1", "--warmup", "0", "--no-torch"])
    res = bench_draft.bench_session(get_driver("cpu"), cyc, b, want, "packed", args)
    assert res["mismatching"] == 2 and "rank 1" in res["first_mismatch"]


def test_a_new_op_groups_under_its_own_name(corpora):
    """Commands another change adds to the draft (dense projections, attention) appear under their op."""
    cyc, _, _ = bind(corpora["dspark"])
    i = next(c.index for c in cyc.commands if c.op == "moe_shared" and c.boundary.layer == 1)
    cmd = cyc.commands[i]
    cyc.commands[i] = dataclasses.replace(cmd, boundary=dataclasses.replace(cmd.boundary, op="dense_wq_b"))
    nodes = [(c.index, "k", 1.0) for c in cyc.commands] + [(i, "k2", 0.5)]
    t = stage_table(cyc, nodes, "draft")
    assert t["stages"][1]["kinds"]["dense_wq_b"] == {"nodes": 2, "commands": 1, "ms": 1.5}
    assert "dense_wq_b" not in t["stages"][0]["kinds"] and "moe_shared" in t["stages"][0]["kinds"]
    assert t["total_ms"] == pytest.approx(sum(ms for c, _, ms in nodes if cyc.commands[c].boundary.phase == "draft"))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(0, 10, allow_nan=False), min_size=4, max_size=4), min_size=1, max_size=7))
def test_median_nodes(runs):
    nodes = [[(i, f"n{i}", ms) for i, ms in enumerate(run)] for run in runs]
    med = median_nodes(nodes)
    assert [(c, n) for c, n, _ in med] == [(i, f"n{i}") for i in range(4)]
    assert [ms for _, _, ms in med] == [statistics.median(r[i] for r in runs) for i in range(4)]


def test_median_nodes_refuses_different_launches():
    with pytest.raises(UsageError):
        median_nodes([[(0, "a", 1.0)], [(1, "a", 1.0)]])
    with pytest.raises(UsageError):
        median_nodes([])


def test_replay_breakdown_json_has_the_stage_table(corpora):
    import json
    from conftest import run_shell
    r = run_shell("replay", corpora["dspark"], "--driver", "cpu", "--epochs", "1", "--breakdown", "--json")
    assert r.returncode == 0, r.stderr
    b = json.loads(r.stdout)["breakdown"]
    assert sorted(b["stages"]) == ["draft", "verify"]
    assert sorted(b["stages"]["draft"]["stages"]) == ["0", "1", "2"]
    assert b["stages"]["draft"]["total_ms"] + b["stages"]["verify"]["total_ms"] == pytest.approx(b["total_ms"])


class HostCuda:
    """The cuda driver's part the tool uses, on tests/test_cuda_moe_graph.py's host-memory driver API:
    a real CudaSession (variants resolved, arenas laid out, launches bound) whose epochs are interpreted
    through the contracts; every profiled kernel takes 0.5 ms."""

    arch, sm = "sm_90", 90

    def __init__(self):
        from test_cuda_moe_graph import HostMemoryDriver
        self.cu = HostMemoryDriver()
        self.cu.cuMemGetInfo = lambda: ((80 << 30) - sum(a.size for a in self.cu.mem.values()), 80 << 30)

    def load(self, cycle, variants):
        from test_cuda_moe_graph import interpret, run_moe_launch
        from decoder_shell.drivers.cuda.session import CudaSession
        s = CudaSession(self, cycle, variants)

        def run(graph=True):
            if s.stale:
                for ln in s.decodes:
                    run_moe_launch(self.cu, ln.func, ln)
                s.stale = False
            interpret(s, self.cu)
            return [1.0] * cycle.ranks

        def profile():
            run()
            return [(c, ln.func, 0.5) for ln, c in zip(s.graph.eager, s.graph.commands)]
        s.run, s.profile = run, profile
        return s


@pytest.mark.parametrize("form", ["packed", "moe-expanded"])
def test_draft_session_on_the_cuda_session(corpora, monkeypatch, form):
    from decoder_shell.contracts.qlinear import QWeight, expand
    from decoder_shell.drivers.cuda import kernels as K
    from decoder_shell.drivers.cuda import moe as M
    monkeypatch.setattr(K, "compile_cubin", lambda *a, **k: b"\x7fELF")  # NVRTC builds: test_cuda_moe_build.py
    monkeypatch.setattr(M, "build", lambda arch: b"\x7fELF")
    cyc, b, want = bind(corpora["dspark"])
    drv = HostCuda()
    args = bench_draft.parse(["--epochs", "1", "--profiles", "1", "--warmup", "0"])
    res = bench_draft.bench_session(drv, cyc, b, want, form, args)
    assert res["mismatching"] == 0 and res["elements"] > 0
    assert not drv.cu.mem, "the session left device memory allocated"
    kinds = res["stages"]["kinds"]
    assert kinds == list(dict.fromkeys(command_kind(cyc, c.index) for c in cyc.commands if c.boundary.phase == "draft"))
    routed = res["stages"]["stages"][0]["kinds"]["moe_routed"]
    assert routed == {"nodes": 3 * cyc.ranks, "commands": 1, "ms": 0.5 * 3 * cyc.ranks}  # up, qdq(h), down per rank
    mem = res["device_memory"]
    assert mem["session_bytes"] >= sum(mem["arenas_per_rank"].values()) * cyc.ranks
    assert (mem["arenas_per_rank"]["expanded"] > 0) == (form == "moe-expanded")
    stacks = res.pop("_stacks", None)
    if form == "packed":
        assert stacks is None
        return
    cmd = next(c for c in cyc.commands if c.op == "moe_routed")
    p = {n: b.injected[0][cmd.inputs[n]] for n in ("w13", "s13", "w2", "s2")}
    for e in range(p["w13"].shape[0]):
        for m in range(2):
            assert np.array_equal(stacks[0][e, m].view(np.uint16),
                                  expand(QWeight("mxfp4", p["w13"][e, m], p["s13"][e, m])).view(np.uint16))
        assert np.array_equal(stacks[1][e].view(np.uint16), expand(QWeight("mxfp4", p["w2"][e], p["s2"][e])).view(np.uint16))


def test_a_failed_synth_is_one_usage_error(tmp_path):
    with pytest.raises(UsageError, match="dsv41-dspark-T2000.*--draft-rows"):
        bench_draft.synth_all([2000], "dspark", 0, tmp_path, 1)


def test_the_whole_tool_on_a_cuda_session_over_host_memory(corpora, monkeypatch, tmp_path, capsys):
    """run(): corpora taken, bound one ahead, both forms, the JSON, the tables and the summary last."""
    import json
    import decoder_shell.drivers as drivers
    from decoder_shell.drivers.cuda import kernels as K
    from decoder_shell.drivers.cuda import moe as M
    monkeypatch.setattr(K, "compile_cubin", lambda *a, **k: b"\x7fELF")
    monkeypatch.setattr(M, "build", lambda arch: b"\x7fELF")
    drv = HostCuda()
    drv.gpu = "host memory"
    monkeypatch.setattr(drivers, "get_driver", lambda *a, **k: drv)
    out = tmp_path / "b.json"
    rc = bench_draft.main(["--corpus", str(corpora["dspark"]), str(corpora["mtp1"]), "--epochs", "1", "--profiles",
                           "1", "--warmup", "0", "--no-torch", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    j = json.loads(out.read_text())
    assert [c["draft_kind"] for c in j["cases"]] == ["dspark", "mtp1"] and j["mismatching_elements"] == 0
    assert all(sorted(c["forms"]) == ["moe-expanded", "packed"] for c in j["cases"])
    summary = text[text.index("\nsummary") + 1:].splitlines()
    assert len(summary) == 3 + 4 and all(line.endswith("| 0 |") for line in summary[3:])
    assert "T=5 moe-expanded: per stage and command kind" in text and "| moe_routed |" in text
