"""Fuzz: hypothesis-driven mutations of a real corpus (bytes, JSON values and types, file kinds,
links, permissions, stray files), each run through `shell verify` or `shell replay` in a worker
process under a memory and a time limit.

Every case must end as an exit code of 0, 1 or 2 with at most one stderr line, no traceback, no
hang and no over-limit; a corpus whose content differs from what was written (or that is reached
through a link, or is not made of regular files) must never be accepted, and a corpus whose content
is unchanged must never be refused. Mutations that re-seal corpus.json afterwards (as a writer of
that content would have) reach the schema and the checks behind the seal; for them only the
no-crash properties are asked, since a sealed corpus with other constants is a different corpus.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoder_shell.corpus.synth import synth
from decoder_shell.geometry import Geometry

from conftest import REPO, reseal

CASES = int(os.environ.get("FUZZ_CASES", 1000))
LIMIT_S = 20.0
LIMIT_AS = 3 << 30
WATCHDOG_S = LIMIT_S + 30
GEOMETRY = Geometry("fuzz", hidden=16, layers=1, ranks=2, verify_rows=1, draft_rows=0)


class Worker:
    """tests/fuzz_worker.py as a subprocess; restarted when a case kills it."""

    def __init__(self):
        self.proc = None
        self.start()

    def start(self):
        env = dict(os.environ, PYTHONPATH=str(REPO), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "fuzz_worker.py"), str(LIMIT_S),
                                      str(LIMIT_AS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env)

    def run(self, argv: list[str]) -> dict:
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], WATCHDOG_S)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.proc.kill()
            self.proc.wait()
            self.start()
            return {"code": -3, "stderr": "", "crash": "the worker hung or died", "s": WATCHDOG_S, "maxrss_kib": 0}
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(30)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("fuzz")
    original = base / "original"
    synth(GEOMETRY, original, seed=7)
    files = sorted(str(p.relative_to(original)) for p in original.rglob("*") if p.is_file())
    dirs = sorted(str(p.relative_to(original)) for p in original.rglob("*") if p.is_dir())
    w = Worker()
    state = {"n": 0, "codes": {}, "shell_s": 0.0}
    yield {"base": base, "original": original, "files": files, "dirs": dirs, "worker": w, "state": state}
    w.close()
    print(f"fuzz: {state['n']} cases, exit codes {state['codes']}, {state['shell_s']:.0f} s in the shell")
    assert state["n"] >= CASES, state  # the suite really ran its cases
    assert state["codes"].get(0) and state["codes"].get(2), state  # both accepted and refused corpora


# --- mutations -------------------------------------------------------------------------------------
BIG_INT, DEEP, NAN = "__big_int__", "__deep__", "__nan__"
HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70), st.integers(-3, 40),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.5, 1e-320, 1e308, -0.0, 1e9]),
    st.text(max_size=12), st.lists(st.integers(-2, 2), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.sampled_from([BIG_INT, DEEP, NAN, 10 ** 9, 2 ** 63, "20", "hop", "bfloat16", -1]))


def json_paths(v, prefix=()):
    yield prefix
    if isinstance(v, dict):
        for k, x in v.items():
            yield from json_paths(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from json_paths(x, prefix + (i,))


def set_at(doc, path, value):
    if not path:
        return value
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


def dump(doc) -> str:
    text = json.dumps(doc, indent=1)
    text = text.replace(f'"{BIG_INT}"', "7" * 5000).replace(f'"{NAN}"', "NaN")
    return text.replace(f'"{DEEP}"', "[" * 100_000 + "]" * 100_000)


def mutate_json(data, path: Path):
    doc = json.loads(path.read_text())
    paths = list(json_paths(doc))
    where = data.draw(st.sampled_from(paths), label="json path")
    op = data.draw(st.sampled_from(["set", "delete", "add"]), label="json op")
    if op == "delete" and where:
        parent = doc
        for k in where[:-1]:
            parent = parent[k]
        del parent[where[-1]]
    elif op == "add":
        node = doc
        for k in where:
            node = node[k]
        if isinstance(node, dict):
            node[data.draw(st.text(max_size=8), label="new key")] = data.draw(HOSTILE, label="new value")
        elif isinstance(node, list):
            node.append(data.draw(HOSTILE, label="new item"))
    else:
        doc = set_at(doc, where, data.draw(HOSTILE, label="value"))
    path.write_text(dump(doc))


def mutate_bytes(data, path: Path):
    raw = bytearray(path.read_bytes())
    op = data.draw(st.sampled_from(["flip", "truncate", "append", "insert", "replace"]), label="bytes op")
    i = data.draw(st.integers(0, max(0, len(raw) - 1)), label="offset")
    if op == "flip" and raw:
        raw[i] ^= data.draw(st.integers(1, 255), label="xor")
    elif op == "truncate":
        raw = raw[:i]
    elif op == "append":
        raw += data.draw(st.binary(min_size=1, max_size=64), label="tail")
    elif op == "insert":
        raw[i:i] = data.draw(st.binary(min_size=1, max_size=8), label="inserted")
    else:
        raw = bytearray(data.draw(st.binary(max_size=64), label="whole"))
    path.write_bytes(bytes(raw))


def replace_kind(data, path: Path, outside: Path):
    kind = data.draw(st.sampled_from(["fifo", "dir", "dev-zero", "link-out", "link-loop", "link-inside", "empty",
                                      "remove"]), label="kind")
    copy = outside / path.name
    if kind == "link-out":
        if path.is_dir():
            shutil.copytree(path, copy, symlinks=True)
        else:
            shutil.copy2(path, copy)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "link-out":
        path.symlink_to(copy)
    elif kind == "link-loop":
        path.symlink_to(path.name)
    elif kind == "link-inside":
        path.symlink_to(os.path.relpath(path.parent, path.parent))  # a link to its own folder
    elif kind == "empty":
        path.write_bytes(b"")


def stray(data, root: Path) -> list[str]:
    """Add a file nobody wrote; returns what to remove afterwards (the file, then new folders)."""
    where = data.draw(st.sampled_from(["blobs/zz/" + "a" * 64 + ".zst", "manifests/verify/r0/9999-allreduce.json",
                                       "manifests/extra.json", "notes.txt", "blobs/" + "0" * 70]), label="stray")
    p = root / where
    new = [str(d.relative_to(root)) for d in p.parents if d != root and str(d).startswith(str(root)) and not d.exists()]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.draw(st.binary(max_size=32), label="stray bytes"))
    return [where, *new]


def restore(work: Path, original: Path, rel: str) -> None:
    """Put `rel` back as it was written (or remove it when it was not there): no copy of the whole corpus."""
    p, src = work / rel, original / rel
    if os.path.lexists(p):
        if p.is_dir() and not p.is_symlink():
            for d, subdirs, _ in os.walk(p):
                for sd in subdirs:
                    os.chmod(os.path.join(d, sd), 0o755)
            os.chmod(p, 0o755)
            shutil.rmtree(p)
        else:
            p.unlink()
    if src.is_dir():
        shutil.copytree(src, p, symlinks=True)
    elif src.exists():
        shutil.copy2(src, p)


# --- the oracle -------------------------------------------------------------------------------------
def intact(work: Path, original: Path, files: list[str]) -> bool:
    """Every file that was written is still a regular file at its place, no link on the way, readable,
    with the same content (corpus.json: the same JSON values)."""
    real = os.path.realpath(work)
    for rel in files:
        p = work / rel
        try:
            if os.path.realpath(p) != os.path.join(real, rel) or not stat.S_ISREG(os.lstat(p).st_mode):
                return False
            if not os.access(p, os.R_OK) or not all(os.access(d, os.R_OK | os.X_OK) for d in p.parents
                                                    if str(d).startswith(str(work))):
                return False
            got, want = p.read_bytes(), (original / rel).read_bytes()
        except OSError:
            return False
        if rel == "corpus.json":  # the same values, typed: false is not 0 and 1.0 is not 1
            try:
                if json.dumps(json.loads(got), sort_keys=True) != json.dumps(json.loads(want), sort_keys=True):
                    return False
            except ValueError:
                return False
        elif got != want:
            return False
    return True


@settings(max_examples=CASES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_mutation_crashes_hangs_or_is_accepted_corrupt(world, data):
    st_ = world["state"]
    st_["n"] += 1
    work, original = world["base"] / "work", world["original"]
    if not work.exists():
        shutil.copytree(original, work, symlinks=True)
    outside = world["base"] / f"o{st_['n']}"
    outside.mkdir()
    touched, new = [], []
    try:
        kind = data.draw(st.sampled_from(["json", "json", "bytes", "bytes", "kind", "dir-kind", "perm", "stray"]),
                         label="mutation")
        resealed = False
        if kind == "json":
            rel = data.draw(st.sampled_from([f for f in world["files"] if f.endswith(".json")]), label="file")
            touched = [rel, "corpus.json"]
            mutate_json(data, work / rel)
            resealed = data.draw(st.booleans(), label="reseal")
        elif kind == "bytes":
            rel = data.draw(st.sampled_from(world["files"]), label="file")
            touched = [rel]
            mutate_bytes(data, work / rel)
        elif kind in ("kind", "dir-kind"):
            rel = data.draw(st.sampled_from(world["files"] if kind == "kind" else world["dirs"]), label="path")
            touched = [rel]
            replace_kind(data, work / rel, outside)
        elif kind == "perm":
            rel = data.draw(st.sampled_from(world["files"] + world["dirs"]), label="path")
            touched = [rel]
            os.chmod(work / rel, data.draw(st.sampled_from([0o000, 0o200, 0o444, 0o111]), label="mode"))
        else:
            new = stray(data, work)
        if resealed:
            try:
                reseal(work)
            except Exception:  # noqa: BLE001 - a document too broken to re-seal stays as it is
                resealed = False
        whole = intact(work, original, world["files"])
        argv = data.draw(st.sampled_from([["verify", str(work)], ["verify", str(work), "--json"],
                                          ["replay", str(work), "--epochs", "1", "--settle", "0", "--driver", "cpu"]]),
                         label="command")
        r = world["worker"].run(argv)
        st_["codes"][r["code"]] = st_["codes"].get(r["code"], 0) + 1
        st_["shell_s"] += r["s"]
        lines = [ln for ln in r["stderr"].splitlines() if ln.strip()]
        assert not r["crash"], r["crash"]
        assert r["code"] in (0, 1, 2), r
        assert "Traceback" not in r["stderr"] and len(lines) <= 1, r["stderr"]
        assert r["code"] != 2 or len(lines) == 1, r
        assert "out of memory" not in r["stderr"] and r["s"] < LIMIT_S, r
        assert r["maxrss_kib"] * 1024 < LIMIT_AS, r
        if whole:
            assert r["code"] == 0, ("an unchanged corpus was refused", r)
        elif not resealed:
            assert r["code"] == 2, ("a changed corpus was not refused as bad input", r)
    finally:
        for rel in new:
            p = work / rel
            p.rmdir() if p.is_dir() else p.unlink()
        for rel in touched:
            restore(work, original, rel)
        shutil.rmtree(outside)
        for lock in work.parent.glob(".work.*"):
            lock.unlink()
        assert intact(work, original, world["files"]), "the working copy was not restored"
