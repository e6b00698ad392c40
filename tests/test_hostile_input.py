"""The crafted corpora and arguments of issue 12, one named test each: every one ends as one line on
stderr and the right exit code, in bounded time and memory, and never as a kernel mismatch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zstandard

from decoder_shell.commands.ops import op_tensors
from decoder_shell.corpus import manifest as mf
from decoder_shell.corpus.blobs import TRAILER, TRAILER_MAGIC
from decoder_shell.corpus.store import Corpus, CorpusInfo
from decoder_shell.geometry import Geometry

from conftest import REPO, assert_one_line_error, reseal, run_shell

QUICK_S = 30  # every refusal below comes long before this (the repros ran for minutes or days)


def edit_corpus_json(root: Path, edit, seal: bool = True) -> Path:
    path = root / "corpus.json"
    d = json.loads(path.read_text())
    edit(d)
    path.write_text(json.dumps(d, indent=1))
    if seal:
        try:
            reseal(root)  # as a writer of these values would have: the schema, not the seal, must refuse them
        except Exception:  # noqa: BLE001 - values the geometry itself cannot hold stay unsealed
            pass
    return path


def refused(res, code=2, names=None) -> str:
    return assert_one_line_error(res, code, names)


def timed_shell(*args):
    t0 = time.monotonic()
    r = run_shell(*args, timeout=QUICK_S * 4)
    assert time.monotonic() - t0 < QUICK_S, f"{args} took {time.monotonic() - t0:.0f} s"
    return r


# --- numbers without bounds ------------------------------------------------------------------------
def test_a_billion_segments_is_refused_before_any_allocation(corpus_copy):
    path = edit_corpus_json(corpus_copy, lambda d: d["collective"]["contract"].update(segments=10 ** 9))
    line = refused(timed_shell("replay", corpus_copy, "--driver", "cpu", "--epochs", "1"), 2, path)
    assert "segments" in line


def test_a_billion_sinkhorn_iterations_is_refused(corpus_copy):
    path = edit_corpus_json(corpus_copy, lambda d: d["geometry"]["mhc"].update(sinkhorn_iters=10 ** 9))
    assert "sinkhorn_iters" in refused(timed_shell("verify", corpus_copy), 2, path)


def test_the_largest_valid_geometry_is_refused_by_the_memory_estimate(tmp_path):
    """A small, sealed corpus whose geometry asks for far more memory than any host has: refused
    with one line before a blob is read (the issue's 148 KB corpus asked for 24 GiB)."""
    g = Geometry("huge", hidden=65536, layers=1, ranks=64, verify_rows=1024, draft_rows=0)
    root = tmp_path / "huge"
    c = Corpus(root, CorpusInfo(g, collective={"contract": {}, "how": "synth"}))
    for b in g.boundaries():
        for r in range(g.ranks):
            entries = tuple(mf.TensorEntry(s.name, s.role, s.dtype, s.shape, "0" * 64) for s in op_tensors(b, g))
            p = mf.manifest_path(root, b, r)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(mf.encode(mf.Manifest(b, r, entries, {})))
    c.save()
    for cmd in (("verify", root), ("replay", root, "--driver", "cpu"), ("gate", root, "--delete", "mhc")):
        assert "GiB of memory" in refused(timed_shell(*cmd), 2, root)


# --- file kinds, sizes, links ---------------------------------------------------------------------
def test_corpus_json_replaced_by_a_fifo_does_not_hang(corpus_copy):
    path = corpus_copy / "corpus.json"
    path.unlink()
    os.mkfifo(path)
    assert "not a regular file" in refused(timed_shell("verify", corpus_copy), 2, path)


def test_corpus_json_linked_to_dev_zero_is_not_read(corpus_copy):
    path = corpus_copy / "corpus.json"
    path.unlink()
    path.symlink_to("/dev/zero")
    refused(timed_shell("replay", corpus_copy, "--driver", "cpu"), 2, path)


def test_a_600_mb_corpus_json_is_not_read_whole(corpus_copy):
    path = corpus_copy / "corpus.json"
    with open(path, "r+b") as f:
        f.truncate(600 << 20)  # sparse: costs no disk
    assert "allowed" in refused(timed_shell("verify", corpus_copy), 2, path)


def test_a_symlink_loop_is_one_line(corpus_copy):
    path = corpus_copy / "corpus.json"
    path.unlink()
    path.symlink_to("corpus.json")
    refused(timed_shell("verify", corpus_copy), 2, path)


def test_a_directory_where_a_file_belongs_is_one_line(corpus_copy):
    path = corpus_copy / "manifests" / "verify" / "r0" / "0001-mhc_pre.json"
    path.unlink()
    path.mkdir()
    assert "folder" in refused(timed_shell("verify", corpus_copy), 2, path)


def test_blobs_folder_linked_outside_is_refused_and_not_written_through(corpus_copy, tmp_path):
    outside = tmp_path / "elsewhere"
    shutil.move(corpus_copy / "blobs", outside)
    (corpus_copy / "blobs").symlink_to(outside)
    before = sorted(p.name for p in outside.rglob("*"))
    assert "link" in refused(timed_shell("verify", corpus_copy), 2)
    r = run_shell("synth", "--seed", "5", "--out", corpus_copy, "--replace")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in outside.rglob("*")) == before  # nothing written through the link
    assert not (corpus_copy / "blobs").is_symlink() and run_shell("verify", corpus_copy).returncode == 0


def test_manifests_folder_linked_outside_is_refused(corpus_copy, tmp_path):
    outside = tmp_path / "m"
    shutil.copytree(corpus_copy / "manifests", outside)
    shutil.rmtree(corpus_copy / "manifests")
    (corpus_copy / "manifests").symlink_to(outside)
    assert "link" in refused(timed_shell("replay", corpus_copy, "--driver", "cpu"), 2)


def test_a_blob_with_an_extra_zstd_frame_and_a_recomputed_trailer_is_refused(corpus_copy):
    import blake3
    m = json.loads((corpus_copy / "manifests" / "verify" / "r0" / "0000-allreduce.json").read_text())
    d = m["tensors"][0]["digest"]
    path = corpus_copy / "blobs" / d[:2] / f"{d}.zst"
    frame = path.read_bytes()[:-TRAILER.size]
    frame += zstandard.ZstdCompressor(write_content_size=True).compress(b"extra")
    path.write_bytes(frame + TRAILER.pack(TRAILER_MAGIC, 32, blake3.blake3(frame).digest()))
    refused(timed_shell("verify", corpus_copy), 2, path)


# --- values and types -----------------------------------------------------------------------------
def test_a_5000_digit_integer_is_one_line(corpus_copy):
    path = corpus_copy / "corpus.json"
    path.write_text(path.read_text().replace('"sinkhorn_iters": 20', '"sinkhorn_iters": ' + "9" * 5000))
    refused(timed_shell("verify", corpus_copy), 2, path)


def test_deeply_nested_json_is_one_line(corpus_copy):
    path = corpus_copy / "manifests" / "verify" / "r0" / "0000-allreduce.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    refused(timed_shell("verify", corpus_copy), 2, path)


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["geometry"]["mhc"].update(sinkhorn_iters="20"), "sinkhorn_iters"),
    (lambda d: d["collective"]["contract"].update(offset=0.5), "offset"),
    (lambda d: d.update(collective=None), "collective"),
    (lambda d: d["geometry"]["mhc"].update(hc_eps=-1.0), "hc_eps"),
    (lambda d: d["geometry"].update(hidden=True), "hidden"),
], ids=["iters-string", "offset-float", "collective-null", "eps-negative", "hidden-bool"])
def test_wrong_json_types_are_one_line_naming_the_field(corpus_copy, edit, field):
    path = edit_corpus_json(corpus_copy, edit)
    assert field in refused(timed_shell("replay", corpus_copy, "--driver", "cpu", "--epochs", "1"), 2, path)


# --- integrity of corpus.json ---------------------------------------------------------------------
@pytest.mark.parametrize("old,new", [('"sinkhorn_iters": 20', '"sinkhorn_iters": 21'),
                                     ('"hc_eps": 1e-06', '"hc_eps": 2e-06'),
                                     ('"offset": 0', '"offset": 1')], ids=["iters", "eps", "offset"])
def test_a_one_byte_edit_of_corpus_json_is_corpus_json_was_modified(corpus_copy, old, new):
    path = corpus_copy / "corpus.json"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    for cmd in (("verify", corpus_copy), ("verify", corpus_copy, "--record"),
                ("replay", corpus_copy, "--driver", "cpu", "--epochs", "1")):
        assert "corpus.json was modified" in refused(run_shell(*cmd), 2, path)
    assert path.read_text() == text.replace(old, new)  # --record did not re-seal (or rebase) it


def test_an_older_unsealed_corpus_is_sealed_by_verify_record(corpus_copy):
    path = corpus_copy / "corpus.json"
    d = json.loads(path.read_text())
    del d["digest"], d["manifests"]
    path.write_text(json.dumps(d))
    assert "verify" in refused(run_shell("replay", corpus_copy, "--driver", "cpu"), 2, path)
    v = run_shell("verify", corpus_copy, "--json")
    assert v.returncode == 0 and json.loads(v.stdout)["sealed"] is False
    assert run_shell("verify", corpus_copy, "--record").returncode == 0
    assert run_shell("replay", corpus_copy, "--driver", "cpu", "--epochs", "2").returncode == 0


# --- outputs the user names -----------------------------------------------------------------------
def test_unwritable_outputs_are_one_line(corpus_copy, tmp_path):
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    long_name = tmp_path / ("n" * 300 + ".json")
    cases = [("replay", corpus_copy, "--driver", "cpu", "--epochs", "1", "--json-out", a_file / "r.json"),
             ("replay", corpus_copy, "--driver", "cpu", "--epochs", "1", "--json-out", long_name),
             ("replay", corpus_copy, "--driver", "cpu", "--epochs", "1", "--plot", tmp_path / "x.unknownext"),
             ("synth", "--out", a_file / "c"),
             ("synth", "--out", tmp_path / ("n" * 300))]
    for args in cases:
        refused(run_shell(*args), 2)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes regardless of permissions")
def test_unreadable_files_and_read_only_folders_are_one_line(corpus_copy, tmp_path):
    (corpus_copy / "corpus.json").chmod(0)
    refused(run_shell("verify", corpus_copy), 2, corpus_copy / "corpus.json")
    (corpus_copy / "corpus.json").chmod(0o644)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    refused(run_shell("synth", "--out", ro / "c"), 2)
    corpus_copy.parent.chmod(0o555)
    try:
        refused(run_shell("verify", corpus_copy, "--record"), 2)
    finally:
        corpus_copy.parent.chmod(0o755)


def test_help_lists_the_exit_codes():
    r = subprocess.run([sys.executable, "-m", "decoder_shell.cli", "--help"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0
    for code, words in (("0", "success"), ("1", "mismatch"), ("2", "bad usage"), ("3", "driver"), ("4", "kernel"), ("5", "UNTIMED")):
        assert any(line.strip().startswith(code) and words in line for line in r.stdout.splitlines()), r.stdout
