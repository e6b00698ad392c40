"""Op selectors and user kernel specs: what they resolve to on the shipped corpus, and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import blake3
import pytest

from decoder_shell.commands.program import build_cycle
from decoder_shell.corpus.store import Corpus
from decoder_shell.errors import UsageError
from decoder_shell.replay.candidates import KernelCandidate, load_kernel_spec, make_plan, select

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "corpus"
EXAMPLE = REPO / "examples" / "one-shot-allreduce" / "spec.json"


@pytest.fixture(scope="module")
def cycle():
    c = Corpus.open(CORPUS)
    return build_cycle(c.geometry, c.info.contract())


def names(cycle, idx):
    return [cycle.commands[i].boundary.name for i in idx]


def test_selectors_resolve_to_the_commands_they_name(cycle):
    # tiny geometry: draft = 1 MTP block (2 sub-blocks), verify = 2 layers (4 sub-blocks)
    assert len(select(cycle, "collectives")) == len(select(cycle, "allreduce")) == 3 + 5
    assert len(select(cycle, "mhc")) == 3 + 5
    assert names(cycle, select(cycle, "verify:allreduce")) == [f"verify.{i:04d}.allreduce" for i in (0, 2, 4, 6, 8)]
    assert names(cycle, select(cycle, "draft:mhc")) == ["draft.0001.mhc_pre", "draft.0003.mhc_post_pre",
                                                       "draft.0005.mhc_post_head"]
    assert names(cycle, select(cycle, "mhc_post_head")) == ["draft.0005.mhc_post_head", "verify.0009.mhc_post_head"]
    assert names(cycle, select(cycle, "verify.0003.mhc_post_pre")) == ["verify.0003.mhc_post_pre"]
    every = set(select(cycle, "mhc")) | set(select(cycle, "collectives"))
    assert every == set(range(len(cycle.commands)))


def test_plan_maps_commands_to_variants(cycle):
    plan = make_plan(cycle, ["verify:mhc_post_pre=fused-m2"], ["draft:collectives"], "copy")
    v = plan.variants
    assert sorted(names(cycle, [i for i, x in v.items() if x == "fused-m2"])) == [
        "verify.0003.mhc_post_pre", "verify.0005.mhc_post_pre", "verify.0007.mhc_post_pre"]
    assert len([x for x in v.values() if x == "copy"]) == 3 and plan.deletion


def test_example_spec_parses_into_a_kernel_candidate(cycle):
    k = load_kernel_spec(EXAMPLE)
    assert isinstance(k, KernelCandidate)
    assert (k.kind, k.language, k.entry, k.op) == ("source", "cuda", "one_shot_allreduce_bf16", "allreduce")
    assert k.grid == (8, 1, 1) and k.block == (256, 1, 1) and k.shared_bytes == 0
    assert [a.text for a in k.args] == ["peers:x", "out:out", "rows", "hidden", "ranks"]
    code = (EXAMPLE.parent / "one_shot_allreduce.cu").read_bytes()
    assert k.code == code and k.digest == blake3.blake3(code).hexdigest()
    plan = make_plan(cycle, [f"collectives=@{EXAMPLE}"])
    assert set(plan.variants.values()) == {k}
    assert plan.changes[0].to_json(cycle)["variant"]["code_blake3"] == k.digest


GOOD = {"source": "k.cu", "entry": "k", "grid": [2], "block": [128], "args": ["in:x", "out:out", "rows", "i32:3"]}
BAD_SPECS = [
    ({**GOOD, "blokc": [1]}, "unknown key(s) blokc"),
    ({k: v for k, v in GOOD.items() if k != "source"}, "exactly one of 'source'"),
    ({**GOOD, "binary": "k.cubin"}, "exactly one of 'source'"),
    ({**GOOD, "source": "missing.cu"}, "cannot read source 'missing.cu'"),
    ({**GOOD, "source": "k.txt"}, "cannot tell the language"),
    ({**GOOD, "entry": "2bad"}, "'entry' must be"),
    ({**GOOD, "grid": [0]}, "'grid' must be 1 to 3 positive integers"),
    ({**GOOD, "block": [64, 32]}, "2048 threads"),
    ({**GOOD, "shared_bytes": -1}, "'shared_bytes'"),
    ({**GOOD, "args": []}, "'args' must be a non-empty list"),
    ({**GOOD, "args": ["x"]}, "argument 'x'"),
    ({**GOOD, "args": ["ptr:x"]}, "unknown kind 'ptr'"),
    ({**GOOD, "args": ["i32:9999999999"]}, "out of range"),
    ({**GOOD, "args": ["in:residual"]}, "does not bind to allreduce"),
    ({**GOOD, "args": ["in:out"]}, "does not bind to allreduce"),
    ({**GOOD, "op": "mhc_pre"}, "kernel is for mhc_pre"),
    ([1, 2], "a candidate spec is a JSON object"),
]


@pytest.mark.parametrize("spec,msg", BAD_SPECS, ids=[m for _, m in BAD_SPECS])
def test_bad_specs_are_one_line_errors_naming_the_file(tmp_path, spec, msg):
    (tmp_path / "k.cu").write_text("extern \"C\" __global__ void k() {}\n")
    (tmp_path / "k.txt").write_text("")
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    p = subprocess.run([sys.executable, "-m", "decoder_shell.cli", "gate", str(CORPUS), "--driver", "cpu",
                        "--candidate", f"collectives=@{path}"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and msg in lines[0], lines


def test_spec_that_is_not_json(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text("{\n  'grid': 1\n}")
    with pytest.raises(UsageError, match=r"spec.json: not valid JSON \(line 2"):
        load_kernel_spec(path)


def test_binary_and_source_specs_infer_their_format(tmp_path):
    (tmp_path / "k.cubin").write_bytes(bytes(range(256)))
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k() {}\n')
    (tmp_path / "b.json").write_text(json.dumps({**{k: v for k, v in GOOD.items() if k != "source"},
                                                 "binary": "k.cubin"}))
    (tmp_path / "c.json").write_text(json.dumps({**GOOD, "source": "k.cu", "block": 64, "grid": [1, 2, 3]}))
    b = load_kernel_spec(tmp_path / "b.json")
    assert (b.kind, b.language, b.code) == ("binary", "cubin", bytes(range(256)))
    c = load_kernel_spec(tmp_path / "c.json")
    assert (c.kind, c.language, c.block, c.grid) == ("source", "cuda", (64, 1, 1), (1, 2, 3))
    assert c.args[-1].kind == "i32" and c.args[-1].value == 3


@pytest.mark.parametrize("name,field", [("k.cl", "source"), ("k.spv", "binary")])
def test_specs_no_driver_can_run_are_refused_when_read(tmp_path, name, field):
    (tmp_path / name).write_bytes(b"__kernel void k() {}\n")
    spec = {**{k: v for k, v in GOOD.items() if k != "source"}, field: name}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    with pytest.raises(UsageError) as err:
        load_kernel_spec(tmp_path / "s.json")
    msg = str(err.value)
    assert msg.startswith(str(tmp_path / "s.json")) and "no driver runs" in msg and "\n" not in msg
