"""What a user sees: --version, defaults in every --help, progress bars on a terminal only, -q, -v."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

import pytest
from pathlib import Path

from conftest import REPO, SHIPPED_CORPUS, run_shell

SUBCOMMANDS = ("synth", "verify", "inspect", "replay", "gate", "report", "capture", "serve-reference")


def run_on_terminal(*args, timeout=300, codes=(0,)) -> str:
    """Run `shell ARGS` with stdout on a pseudo-terminal, as in an interactive shell; returns what it drew."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    main, sub = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "decoder_shell.cli", *map(str, args)], stdout=sub,
                         stderr=subprocess.PIPE, env=env, cwd=REPO)
    os.close(sub)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the terminal closed: the process is done
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    p.wait(timeout=timeout)
    assert p.returncode in codes, p.stderr.read().decode()
    return b"".join(chunks).decode(errors="replace")


def test_version_names_version_commit_and_drivers():
    r = run_shell("--version")
    assert r.returncode == 0 and r.stderr == ""
    from decoder_shell import __version__
    first, *rest = r.stdout.splitlines()
    assert re.fullmatch(rf"decoder-shell {re.escape(__version__)}( \(commit [0-9a-f]{{12}}(\+dirty)?\))?", first)
    drivers = {ln.split()[1]: ln.split()[2] for ln in rest if ln.startswith("driver ")}
    assert drivers["cpu"] == "available:" and set(drivers) == {"cpu", "cuda", "level-zero"}


def test_commit_is_pinned_by_the_copier_or_marked_dirty(tmp_path, monkeypatch):
    """A tree copied without its git metadata names the commit it was copied from; a checkout with local
    changes says so; a non-hex pin is ignored."""
    import shutil
    import subprocess
    from decoder_shell import about
    monkeypatch.setenv("DECODER_SHELL_COMMIT", "0123456789abcdef0123")
    assert about.commit() == "0123456789ab"
    monkeypatch.setenv("DECODER_SHELL_COMMIT", "not a commit; rm -rf")
    assert about.commit() != "not a commit; rm -rf"
    monkeypatch.delenv("DECODER_SHELL_COMMIT")
    # a real checkout of a copy of the package: clean, then one file changed
    repo = tmp_path / "repo"
    shutil.copytree(Path(about.__file__).parent, repo / "decoder_shell",
                    ignore=shutil.ignore_patterns("__pycache__", "data"))
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    head = subprocess.run(git + ["rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    probe = "import decoder_shell.about as a; print(a.commit())"
    env = {k: v for k, v in os.environ.items() if k != "DECODER_SHELL_COMMIT"}
    env["PYTHONPATH"] = str(repo)

    def ask():
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                              cwd=tmp_path).stdout.strip()

    assert ask() == head
    (repo / "decoder_shell" / "about.py").write_text((repo / "decoder_shell" / "about.py").read_text() + "\n")
    assert ask() == head + "+dirty"


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_help_shows_every_default(command):
    from decoder_shell.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    r = run_shell(command, "--help")
    assert r.returncode == 0
    # argparse starts each entry at an indent of two; its wrapped lines are indented further
    entries, cur = {}, None
    for line in r.stdout.splitlines():
        if re.match(r"  \S", line):
            cur = line.split()[0].rstrip(",")
            entries[cur] = line
        elif cur and line.startswith("   "):
            entries[cur] += line
        else:
            cur = None
    for action in sub._actions:
        d = action.default
        if d is None or d is False or d == [] or d == "==SUPPRESS==":
            continue
        key = action.option_strings[0] if action.option_strings else action.dest
        entry = " ".join(entries[key].split())
        shown = format(d, "g") if isinstance(d, float) else str(d)
        assert "default" in entry and "".join(shown.split()) in "".join(entry.split()), (command, key, entry)


def test_help_says_where_the_default_corpus_lives():
    r = run_shell("replay", "--help")
    assert "the tiny corpus shipped in the package" in " ".join(r.stdout.split())
    assert str(SHIPPED_CORPUS) in "".join(r.stdout.split())


def test_progress_bars_only_on_a_terminal():
    drawn = run_on_terminal("replay", "--epochs", "40", "--changed", "2")
    assert "replay: graph epochs" in drawn and "replay: changed epochs" in drawn
    assert "EXACT: 40/40 graph epochs exact" in drawn
    quiet = run_on_terminal("replay", "--epochs", "40", "-q")
    assert "replay: graph epochs" not in quiet and "EXACT: 40/40" in quiet
    piped = run_shell("replay", "--epochs", "40")
    assert "replay: graph epochs" not in piped.stdout + piped.stderr and "\x1b[?25l" not in piped.stdout


def test_progress_on_synth_verify_and_gate(tmp_path):
    drawn = run_on_terminal("synth", "--out", tmp_path / "c")
    assert "synth: writing boundaries" in drawn
    drawn = run_on_terminal("verify", tmp_path / "c")
    assert "verify: reading and checking blobs" in drawn
    assert "verify: recomputing every op from its captured inputs" in drawn
    drawn = run_on_terminal("gate", tmp_path / "c", "--driver", "cpu", "--candidate", "allreduce=twice",
                            "--reps", "2", "--epochs", "20", "--changed", "1", codes=(5,))  # UNTIMED on cpu
    assert "gate: blocks of 20 graph epochs" in drawn


def test_verbose_prints_one_line_per_step_and_epoch(tmp_path):
    r = run_shell("replay", "--epochs", "4", "--settle", "1", "--changed", "1", "-v")
    assert r.returncode == 0
    err = r.stderr.splitlines()
    assert re.fullmatch(r"replay: reading the corpus: 16 in \d+\.\d\d s", err[0])
    assert [ln.split(":")[0].strip() for ln in err if ln.startswith("  ")] == \
        ["graph 0", "graph 1", "graph 2", "graph 3", "graph 4", "changed 0"]
    assert re.fullmatch(r"  graph 0: \d+\.\d{3} \d+\.\d{3} ms per rank, exact", err[1])
    assert any(re.fullmatch(r"replay: graph epochs: 5 in \d+\.\d\d s", ln) for ln in err)
    assert run_shell("replay", "--epochs", "2", "-q", "-v").returncode == 2  # one or the other
