"""`shell replay --driver level-zero` end to end: the shipped corpus, a dsv4-flash TP2 M=2 corpus,
fp32 reductions and other ring contracts; and the one-line exits when the runtime is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from decoder_shell.contracts.allreduce import RingContract
from decoder_shell.corpus.store import Corpus
from decoder_shell.corpus.synth import synth
from decoder_shell.errors import DriverUnavailable
from decoder_shell.geometry import preset
from decoder_shell.replay.engine import replay

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def driver():
    from decoder_shell.drivers.level_zero import LevelZeroDriver
    try:
        return LevelZeroDriver()
    except DriverUnavailable as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"level-zero driver unavailable here: {e}")


def shell(*args, env=None, python=(sys.executable,)):
    code = "import sys; from decoder_shell.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([*python, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=900)


def test_shipped_corpus_acceptance(driver):
    r = shell("replay", "corpus", "--driver", "level-zero", "--epochs", "70", "--changed", "8")
    assert r.returncode == 0, r.stderr
    assert "EXACT: 70/70 graph epochs exact, 8/8 changed epochs exact" in r.stdout
    assert "OpenCL CPU" in r.stdout or "Level Zero GPU" in r.stdout


@pytest.mark.slow
def test_dsv4_flash_tp2_m2(driver, tmp_path):
    """The acceptance geometry, fewer epochs than by hand (docs/LEVEL_ZERO.md has the full run)."""
    out = tmp_path / "flash"
    r = shell("synth", "--preset", "dsv4-flash", "--tp", "2", "--verify-rows", "2", "--draft-rows", "1",
              "--out", str(out))
    assert r.returncode == 0, r.stderr
    r = shell("replay", str(out), "--driver", "level-zero", "--epochs", "4", "--changed", "2", "--settle", "1")
    assert r.returncode == 0, r.stderr
    assert "EXACT: 4/4 graph epochs exact, 2/2 changed epochs exact" in r.stdout


@pytest.mark.parametrize("reduce_dtype,contract", [
    ("float32", RingContract()),
    ("float32", RingContract(chunks_per_rank=2, offset=-1, direction=-1, accumulation="fp32", segments=3)),
    ("bfloat16", RingContract(chunks_per_rank=2, offset=-1, direction=-1, accumulation="hop")),
    ("bfloat16", RingContract(max_chunk_bytes=24, offset=1, accumulation="fp32", segments=2)),
])
def test_tiny_cycles_other_dtypes_and_contracts(driver, tmp_path, reduce_dtype, contract):
    g = preset("tiny", tp=3, verify_rows=4, draft_rows=2, draft_kind="dspark", reduce_dtype=reduce_dtype)
    corpus = synth(g, tmp_path / "c", seed=5, contract=contract)
    res = replay(Corpus.open(corpus.root), driver, epochs=3, changed=2, settle=1)
    assert res.exact
    assert [len(res.of(k)) for k in ("graph", "changed")] == [3, 2]
    assert res.timing_meaningful and all(t > 0 for e in res.of("graph") for t in e.times_ms)


def test_delete_variant_leaves_poison(driver):
    """The gate's deletion-only variant really skips the command: its outputs stay poisoned."""
    from decoder_shell.commands.program import build_cycle
    c = Corpus.open(ROOT / "corpus")
    cyc = build_cycle(c.geometry, c.info.contract())
    victim = next(cmd for cmd in cyc.commands if cmd.op == "mhc_post_pre")
    with driver.load(cyc, {victim.index: "delete"}) as s:
        s.poison()
        s.run()
        y = s.read(0, victim.outputs["y"])
        assert (y.view("uint16") == 0xFFFF).all()


def test_list_candidates_names_what_the_driver_runs(driver):
    """The variants --list-candidates shows are the ones a load accepts; an unknown one is refused."""
    import json
    offered = driver.available_variants()
    assert set(offered) == {"delete"} and all(offered.values())
    r = shell("gate", "--list-candidates", "--driver", "level-zero", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["variants"] == offered


def test_unknown_variant_is_usage_error(driver):
    from decoder_shell.commands.program import build_cycle
    from decoder_shell.errors import UsageError
    c = Corpus.open(ROOT / "corpus")
    with pytest.raises(UsageError, match="no implementation"):
        driver.load(build_cycle(c.geometry, c.info.contract()), {0: "warp-speed"})


def test_no_level_zero_gpu_is_one_line_exit_3():
    """Forcing the GPU path where Level Zero has no GPU driver: exit 3, one line, no traceback."""
    from decoder_shell.drivers.level_zero import ze
    try:
        ze.require_driver()
        pytest.skip("a Level Zero GPU is present on this machine")
    except DriverUnavailable:
        pass
    r = shell("replay", "corpus", "--driver", "level-zero", "--epochs", "1",
              env={"SHELL_LEVEL_ZERO_DEVICE": "gpu"})
    assert r.returncode == 3, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Level Zero" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_device_choice_is_usage_error():
    r = shell("replay", "corpus", "--driver", "level-zero", "--epochs", "1",
              env={"SHELL_LEVEL_ZERO_DEVICE": "fpga"})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


INTEL = ("dpctl", "intel_", "intel-", "dpcpp", "tbb", "umf", "tcmlib")


def environment_without_intel(tmp_path: Path) -> Path:
    """A real Python environment holding every installed package except the intel extra's."""
    import decoder_shell
    import numpy
    site = Path(numpy.__file__).resolve().parents[1]
    env = tmp_path / "site"
    env.mkdir()
    for entry in site.iterdir():
        if entry.name.startswith(INTEL) or entry.name.startswith(("decoder_shell", "__editable__")):
            continue
        (env / entry.name).symlink_to(entry)
    (env / "decoder_shell").symlink_to(Path(decoder_shell.__file__).resolve().parent)
    return env


def test_missing_intel_runtime_is_one_line_exit_3(tmp_path):
    env = environment_without_intel(tmp_path)
    r = shell("replay", "corpus", "--driver", "level-zero", "--epochs", "1", python=(sys.executable, "-S"),
              env={"PYTHONPATH": str(env)})
    assert r.returncode == 3, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "intel" in lines[0] and "Traceback" not in r.stderr, r.stderr
    # the same environment runs the cpu driver, so the failure above is the missing runtime alone
    ok = shell("replay", "corpus", "--driver", "cpu", "--epochs", "1", python=(sys.executable, "-S"),
               env={"PYTHONPATH": str(env)})
    assert ok.returncode == 0, ok.stderr
