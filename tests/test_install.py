"""A non-editable install, as a new user gets it: build the wheel from this checkout, install it into a
fresh venv whose dependencies are the test environment's minus the 'capture' extra (torch,
transformers), and run `shell` from a folder outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO

LEFT_OUT = ("torch", "torchgen", "functorch", "transformers", "decoder_shell", "__editable__", "_decoder_shell")


def _run(*cmd, cwd=None, timeout=300):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["COLUMNS"] = "160"
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis"))
    w = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
             "-w", tmp / "dist", src)
    assert w.returncode == 0, w.stdout + w.stderr
    wheel, = (tmp / "dist").glob("decoder_shell-*.whl")
    v = _run(sys.executable, "-m", "venv", "--without-pip", tmp / "venv")
    assert v.returncode == 0, v.stderr
    py = tmp / "venv" / "bin" / "python"
    # The dependencies: every package of this environment except the capture extra and the project.
    deps = tmp / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(LEFT_OUT) and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    site = _run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    (Path(site) / "deps.pth").write_text(f"{deps}\n")
    i = _run(sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", wheel)
    assert i.returncode == 0, i.stdout + i.stderr
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return tmp / "venv" / "bin" / "shell", elsewhere, Path(site)


def test_wheel_replays_the_shipped_corpus_from_any_folder(installed):
    shell, elsewhere, site = installed
    r = _run(shell, "replay", "--epochs", "3", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    assert f"corpus   {site / 'decoder_shell' / 'data' / 'corpus'}" in r.stdout
    assert "EXACT: 3/3 graph epochs exact" in r.stdout
    h = _run(shell, "replay", "--help", cwd=elsewhere)
    assert "the tiny corpus shipped in the package" in h.stdout
    assert str(site / "decoder_shell" / "data" / "corpus") in h.stdout.replace("\n", "").replace(" ", "") or \
        "decoder_shell/data/corpus" in h.stdout


def test_wheel_version_and_missing_extra(installed):
    shell, elsewhere, _ = installed
    v = _run(shell, "--version", cwd=elsewhere)
    assert v.returncode == 0 and v.stdout.startswith("decoder-shell 0.1.0")
    assert "driver cpu         available: cpu (numpy reference)" in v.stdout
    s = _run(shell, "serve-reference", "--port", "0", cwd=elsewhere)
    lines = [ln for ln in s.stderr.splitlines() if ln.strip()]
    assert s.returncode == 3 and len(lines) == 1, s.stderr
    assert lines[0] == ("shell serve-reference: needs torch, which is not installed here: "
                        "pip install 'decoder-shell[reference]'")
