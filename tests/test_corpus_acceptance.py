"""Acceptance: a damaged corpus makes both `shell verify` and `shell replay --driver cpu` exit 2 with
exactly one stderr line that names the offending file, never a traceback.

Every case runs the real CLI in a fresh interpreter on a private copy of a synthesized tiny corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import assert_one_line_error, reseal, run_shell

COMMANDS = {
    "verify": lambda root: ["verify", root],
    "replay": lambda root: ["replay", root, "--driver", "cpu", "--epochs", "2", "--settle", "0"],
}


def manifest_path(root: Path, phase: str, rank: int, index: int) -> Path:
    (p,) = (root / "manifests" / phase / f"r{rank}").glob(f"{index:04d}-*.json")
    return p


def tensor_digest(root: Path, phase: str, rank: int, index: int, name: str) -> str:
    m = json.loads(manifest_path(root, phase, rank, index).read_text())
    return next(t["digest"] for t in m["tensors"] if t["name"] == name)


def blob_path(root: Path, digest: str) -> Path:
    return root / "blobs" / digest[:2] / f"{digest}.zst"


def both_fail(root: Path, names: Path) -> None:
    for cmd, args in COMMANDS.items():
        assert_one_line_error(run_shell(*args(root)), 2, names)


def test_undamaged_copy_passes(corpus_copy):
    for cmd, args in COMMANDS.items():
        res = run_shell(*args(corpus_copy))
        assert res.returncode == 0, (cmd, res.stderr)
        assert res.stderr == ""


# (phase, rank, boundary index, tensor): allreduce input and output, mHC params, mHC outputs; and
# where in the blob file the byte is: the zstd magic, the frame header, the compressed data, the end
CHANGES = [(("verify", 0, 0, "x"), "first"), (("verify", 1, 2, "out"), "last"),
           (("verify", 0, 1, "fn"), "middle"), (("draft", 1, 3, "base"), "header"),
           (("verify", 1, 5, "scale"), "middle"), (("verify", 0, 3, "streams"), "header"),
           (("draft", 0, 1, "next_comb"), "last"), (("verify", 1, 9, "y"), "middle")]


@pytest.mark.parametrize("tensor,where", CHANGES, ids=lambda v: "-".join(map(str, v)) if isinstance(v, tuple) else v)
def test_one_changed_byte_in_a_blob(corpus_copy, tensor, where):
    path = blob_path(corpus_copy, tensor_digest(corpus_copy, *tensor))
    data = bytearray(path.read_bytes())
    i = {"first": 0, "header": 5, "middle": len(data) // 2, "last": len(data) - 1}[where]
    data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    both_fail(corpus_copy, path)


def test_deleted_blob(corpus_copy):
    path = blob_path(corpus_copy, tensor_digest(corpus_copy, "verify", 1, 7, "residual"))
    path.unlink()
    both_fail(corpus_copy, path)


def test_emptied_blob(corpus_copy):
    path = blob_path(corpus_copy, tensor_digest(corpus_copy, "verify", 0, 4, "x"))
    path.write_bytes(b"")
    both_fail(corpus_copy, path)


@pytest.mark.parametrize("keep", [0.0, 0.5, 0.99])
def test_truncated_manifest(corpus_copy, keep):
    path = manifest_path(corpus_copy, "verify", 1, 3)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    both_fail(corpus_copy, path)


def test_deleted_manifest(corpus_copy):
    path = manifest_path(corpus_copy, "draft", 0, 5)
    path.unlink()
    both_fail(corpus_copy, path)


@pytest.mark.parametrize("bad", [
    lambda d: "../" + d[3:],
    lambda d: "../../../../../../etc/passwd",
    lambda d: "/" + d[1:],
    lambda d: d.upper(),
    lambda d: "g" + d[1:],
    lambda d: d[:-1],
    lambda d: d + "0",
    lambda d: None,
    lambda d: 12345,
], ids=["dotdot-64", "dotdot-etc", "absolute", "uppercase", "non-hex", "short", "long", "null", "int"])
def test_bad_digest_in_a_manifest(corpus_copy, bad):
    path = manifest_path(corpus_copy, "verify", 0, 1)
    m = json.loads(path.read_text())
    m["tensors"][1]["digest"] = bad(m["tensors"][1]["digest"])
    path.write_text(json.dumps(m))
    both_fail(corpus_copy, path)


@pytest.mark.parametrize("edit", [
    lambda m: m.update(schema=99),
    lambda m: m.update(op="allreduce"),
    lambda m: m.update(rank=1),
    lambda m: m["tensors"].pop(),
    lambda m: m["tensors"][0].update(shape=[2, 65]),
    lambda m: m["tensors"][0].update(dtype="float16"),
    lambda m: m.update(tensors="nope"),
    lambda m: m.update(attrs=[]),
], ids=["schema", "op", "rank", "missing-tensor", "shape", "dtype", "tensors-type", "attrs-type"])
def test_malformed_manifest(corpus_copy, edit):
    path = manifest_path(corpus_copy, "verify", 0, 3)
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))
    assert_one_line_error(run_shell(*COMMANDS["verify"](corpus_copy)), 2, path)


def test_manifest_that_is_not_an_object(corpus_copy):
    path = manifest_path(corpus_copy, "verify", 0, 2)
    path.write_text("[1, 2, 3]")
    assert_one_line_error(run_shell(*COMMANDS["verify"](corpus_copy)), 2, path)


def test_damaged_corpus_json(corpus_copy):
    path = corpus_copy / "corpus.json"
    path.write_text(path.read_text()[:40])
    both_fail(corpus_copy, path)


def test_swapped_blobs_break_the_link(corpus_copy):
    """Two valid blobs of the same size swapped in a manifest: every read checks out, but the
    consumer no longer names its producer's digest. verify says so (exit 1); replay refuses (exit 2)."""
    path = manifest_path(corpus_copy, "verify", 0, 3)
    m = json.loads(path.read_text())
    byname = {t["name"]: t for t in m["tensors"]}
    other = tensor_digest(corpus_copy, "verify", 1, 2, "x")  # a [2, 64] bf16 like x
    byname["x"]["digest"] = other
    path.write_text(json.dumps(m))
    reseal(corpus_copy)
    v = run_shell("verify", corpus_copy, "--json")
    assert v.returncode == 1 and v.stderr == ""
    rep = json.loads(v.stdout)
    assert rep["linked"] is False and rep["broken_links"] and "verify.0003.mhc_post_pre.x" in rep["broken_links"][0]
    r = run_shell(*COMMANDS["replay"](corpus_copy))
    assert_one_line_error(r, 2, "broken link")


def test_every_one_byte_change_of_a_blob_is_detected(corpus_copy):
    """Every one-byte change of a blob file is caught, including bits zstd decoders ignore (the
    frame header's unused bit, some bits of Huffman-coded literals): the stored bytes carry their own
    blake3 in a trailing skippable frame, so verify and replay exit 2."""
    path = blob_path(corpus_copy, tensor_digest(corpus_copy, "verify", 0, 1, "fn"))
    data = bytearray(path.read_bytes())
    assert data[:4] == b"\x28\xb5\x2f\xfd" and not data[4] & 0x10
    data[4] |= 0x10
    path.write_bytes(bytes(data))
    both_fail(corpus_copy, path)


def test_trailing_bytes_after_the_frame_are_detected(corpus_copy):
    """Bytes appended to a blob file (an oversized blob) are an error: the trailer no longer sits at
    the end of the file, so verify and replay exit 2."""
    path = blob_path(corpus_copy, tensor_digest(corpus_copy, "verify", 0, 0, "x"))
    path.write_bytes(path.read_bytes() + b"appended")
    res = run_shell("verify", corpus_copy)
    assert_one_line_error(res, 2, path)
