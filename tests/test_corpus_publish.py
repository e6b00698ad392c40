"""Writers never destroy: the lock, the refusal of a non-empty --out, --replace as one swap, and
kill -9 at random moments of a real `shell synth --replace` leaving the old corpus or the new one."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from decoder_shell.corpus.publish import CorpusLock, Staging
from decoder_shell.corpus.store import Corpus
from decoder_shell.corpus.synth import synth
from decoder_shell.corpus.verify import verify
from decoder_shell.errors import UsageError
from decoder_shell.geometry import preset

from conftest import REPO, assert_one_line_error, run_shell

G = preset("tiny", tp=2)


def seed_of(root: Path) -> int:
    return json.loads((root / "corpus.json").read_text())["source"]["seed"]


def whole(root: Path) -> int:
    """The corpus in `root` opens sealed, verifies, and holds exactly the blobs its manifests name;
    returns its seed."""
    c = Corpus.open(root)
    rep = verify(c)
    assert rep["ok"] and rep["parity_exact"]
    named = {t.digest for m in c.manifests() for t in m.tensors}
    assert set(c.blobs.digests()) == named
    return c.info.source["seed"]


def test_synth_into_a_non_empty_folder_is_refused_and_replace_swaps(tmp_path):
    out = tmp_path / "c"
    synth(G, out, seed=1)
    before = (out / "corpus.json").read_bytes()
    r = run_shell("synth", "--seed", "2", "--out", out)
    assert "--replace" in assert_one_line_error(r, 2, out)
    assert (out / "corpus.json").read_bytes() == before
    r = run_shell("synth", "--seed", "2", "--out", out, "--replace")
    assert r.returncode == 0, r.stderr
    assert whole(out) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".c.lock", "c"]  # no staging left


def test_a_second_writer_gets_one_line_naming_the_holder(tmp_path):
    out = tmp_path / "c"
    lock = CorpusLock(out).acquire()
    try:
        r = run_shell("synth", "--out", out)
        line = assert_one_line_error(r, 2, out)
        assert f"pid {os.getpid()}" in line
        assert run_shell("verify", out, "--record").returncode == 2  # the lock is held (and no corpus yet)
        with pytest.raises(UsageError, match=f"pid {os.getpid()}"):
            Staging(out).begin()
    finally:
        lock.release()
    assert not out.exists()
    synth(G, out, seed=4)
    assert whole(out) == 4


def test_verify_record_waits_for_no_one_and_refuses_while_a_writer_holds_the_corpus(tmp_path):
    out = tmp_path / "c"
    synth(G, out, seed=1)
    lock = CorpusLock(out).acquire()
    try:
        assert_one_line_error(run_shell("verify", out, "--record"), 2, out)
        assert run_shell("verify", out).returncode == 0  # readers need no lock
    finally:
        lock.release()
    assert run_shell("verify", out, "--record").returncode == 0


def test_two_concurrent_synths_one_wins_the_other_is_refused(tmp_path):
    out = tmp_path / "c"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-m", "decoder_shell.cli", "synth", "--seed", str(s), "--out", str(out)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in (1, 2)]
    res = [(p.wait(120), p.stderr.read()) for p in procs]
    codes = sorted(c for c, _ in res)
    assert codes == [0, 2], res
    loser = next(err for c, err in res if c == 2)
    assert len(loser.strip().splitlines()) == 1 and ("another writer" in loser or "not empty" in loser)
    assert whole(out) in (1, 2)


def test_stale_staging_of_a_killed_writer_is_removed_by_the_next_writer(tmp_path):
    out = tmp_path / "c"
    synth(G, out, seed=1)
    stale = tmp_path / ".c.staging-999999-dead"
    (stale / "blobs").mkdir(parents=True)
    synth(G, out, seed=2, replace=True)
    assert not stale.exists() and whole(out) == 2


def test_an_old_corpus_set_aside_by_a_killed_two_rename_swap_is_put_back(tmp_path):
    out = tmp_path / "c"
    synth(G, out, seed=1)
    os.rename(out, tmp_path / ".c.old-12345")  # killed between the two renames of the fallback swap
    s = Staging(out, replace=True)
    s.begin()
    s.abandon()
    assert whole(out) == 1


KILLS = 10


def test_kill_9_at_random_moments_leaves_the_old_or_the_new_corpus(tmp_path):
    """Real `shell synth --replace` processes killed with SIGKILL at random moments over their whole
    run: after each kill the folder holds one complete corpus (the previous or the new seed), and
    the next writer cleans up and succeeds."""
    out = tmp_path / "c"
    synth(G, out, seed=100)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "decoder_shell.cli", "synth", "--out", str(out), "--replace", "--seed"]
    t0 = time.monotonic()
    subprocess.run([*cmd, "101"], env=env, check=True, capture_output=True)
    full = time.monotonic() - t0
    rng = random.Random(12)
    current, outcomes = 101, set()
    for k in range(KILLS):
        seed = 200 + k
        p = subprocess.Popen([*cmd, str(seed)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 1.05) * full)
        p.send_signal(signal.SIGKILL)
        p.wait()
        got = whole(out)
        assert got in (current, seed), (got, current, seed)
        outcomes.add("new" if got == seed else "old")
        current = got
    assert "old" in outcomes  # some kill fell before the publish
    subprocess.run([*cmd, "999"], env=env, check=True, capture_output=True)
    assert whole(out) == 999
    assert sorted(p.name for p in tmp_path.iterdir()) == [".c.lock", "c"]
