"""The corpus format on real files: content addressing, dedup, links, counts, bounded reads."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import blake3
import numpy as np
import pytest
import zstandard

from decoder_shell.corpus.blobs import BlobStore
from decoder_shell.corpus.store import Corpus
from decoder_shell.corpus.synth import synth
from decoder_shell.errors import CorpusError
from decoder_shell.geometry import preset

from conftest import REPO, assert_one_line_error


def manifests_on_disk(root: Path) -> dict:
    """{(phase, rank, index): manifest dict}, read straight from the JSON files."""
    out = {}
    for p in sorted((root / "manifests").glob("*/r*/*.json")):
        d = json.loads(p.read_text())
        out[(d["phase"], d["rank"], d["index"])] = d
    return out


def digests(m: dict) -> dict:
    return {t["name"]: t["digest"] for t in m["tensors"]}


def blob_files(root: Path) -> dict:
    return {p.name[:-4]: p for p in (root / "blobs").glob("*/*.zst")}


# --- content addressing ------------------------------------------------------------------------
def test_every_blob_is_named_by_the_blake3_of_its_raw_bytes(tiny_corpus):
    files = blob_files(tiny_corpus)
    assert files
    sizes = {t["digest"]: int(np.prod(t["shape"])) * (2 if t["dtype"] == "bfloat16" else 4)
             for m in manifests_on_disk(tiny_corpus).values() for t in m["tensors"]}
    for digest, path in files.items():
        assert path.parent.name == digest[:2]
        frame = path.read_bytes()
        assert frame[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame
        raw = zstandard.ZstdDecompressor().decompress(frame, max_output_size=sizes[digest])
        assert blake3.blake3(raw).hexdigest() == digest
        assert len(raw) == sizes[digest]


def test_blob_store_put_is_idempotent_and_content_addressed(tmp_path):
    store = BlobStore(tmp_path)
    a = np.arange(1000, dtype=np.float32)
    d1, new1 = store.put(a.tobytes())
    path = store.path(d1)
    mtime = path.stat().st_mtime_ns
    d2, new2 = store.put(a.copy().tobytes())  # another array, same bytes
    d3, new3 = store.put((a + 1).tobytes())
    assert d1 == d2 == blake3.blake3(a.tobytes()).hexdigest()
    assert (new1, new2, new3) == (True, False, True)
    assert d3 != d1
    assert path.stat().st_mtime_ns == mtime  # never rewritten
    assert store.get(d1, a.nbytes) == a.tobytes()
    assert sorted(store.digests()) == sorted([d1, d3])
    assert not list(tmp_path.rglob("*.tmp"))


def test_every_referenced_blob_exists_and_none_is_unreferenced(tiny_corpus):
    refs = {d for m in manifests_on_disk(tiny_corpus).values() for d in digests(m).values()}
    assert refs == set(blob_files(tiny_corpus))


# --- dedup, links, cross-rank ------------------------------------------------------------------
def test_replicated_params_are_stored_once(tiny_corpus):
    ms = manifests_on_disk(tiny_corpus)
    by_boundary = defaultdict(dict)
    for (phase, rank, index), m in ms.items():
        by_boundary[(phase, index)][rank] = m
    mhc = 0
    for key, ranks in by_boundary.items():
        if ranks[0]["op"] == "allreduce":
            continue
        mhc += 1
        for name in ("fn", "base", "scale"):
            assert len({digests(m)[name] for m in ranks.values()}) == 1, (key, name)
    assert mhc > 0
    refs = [d for m in ms.values() for d in digests(m).values()]
    files = blob_files(tiny_corpus)
    assert len(files) == len(set(refs)) < len(refs)
    # the params of every (phase, boundary) are distinct from each other's (no accidental sharing)
    fns = {digests(r[0])["fn"] for r in by_boundary.values() if r[0]["op"] != "allreduce"}
    assert len(fns) == mhc


def test_corpus_is_linked_and_cross_rank_exact(tiny_corpus):
    """Where op B consumes what op A produced, both manifests name the same digest (DESIGN 5); the
    producer of each input follows the boundary list of geometry.py."""
    ms = manifests_on_disk(tiny_corpus)
    g = json.loads((tiny_corpus / "corpus.json").read_text())
    checked = 0
    for (phase, rank, index), m in ms.items():
        d = digests(m)
        if m["op"] == "allreduce":
            outs = {digests(ms[(phase, r, index)])["out"] for r in range(g["ranks"])}
            assert len(outs) == 1, f"{phase} {index}: allreduce outputs differ across ranks"
            continue
        assert d["x"] == digests(ms[(phase, rank, index - 1)])["out"]
        if m["op"] != "mhc_pre":
            prev = digests(ms[(phase, rank, index - 2)])
            assert (d["residual"], d["post"], d["comb"]) == (prev["streams"], prev["next_post"], prev["next_comb"])
        checked += 1
    assert checked == sum(m["op"] != "allreduce" for m in ms.values()) > 0


def test_counts_in_corpus_json_match_the_files(tiny_corpus):
    info = json.loads((tiny_corpus / "corpus.json").read_text())
    counts = info["counts"]
    ms = manifests_on_disk(tiny_corpus)
    files = blob_files(tiny_corpus)
    refs = [t for m in ms.values() for t in m["tensors"]]
    assert counts["manifests"] == len(ms)
    assert counts["tensor_refs"] == len(refs)
    assert counts["blobs"] == len(files)
    assert counts["stored_bytes"] == sum(p.stat().st_size for p in files.values())
    nbytes = lambda t: int(np.prod(t["shape"])) * (2 if t["dtype"] == "bfloat16" else 4)  # noqa: E731
    assert counts["referenced_bytes"] == sum(nbytes(t) for t in refs)
    assert counts["unique_bytes"] == sum({t["digest"]: nbytes(t) for t in refs}.values())


def test_synth_is_deterministic(tmp_path):
    g = preset("tiny", tp=3, verify_rows=3, draft_rows=2)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    synth(g, a, seed=5)
    synth(g, b, seed=5)
    synth(g, c, seed=6)
    ma, mb, mc = manifests_on_disk(a), manifests_on_disk(b), manifests_on_disk(c)
    assert ma == mb
    assert set(blob_files(a)) == set(blob_files(b))
    assert ma != mc
    assert set(blob_files(a)) != set(blob_files(c))


def test_manifest_fields(tiny_corpus):
    ms = manifests_on_disk(tiny_corpus)
    for (phase, rank, index), m in ms.items():
        assert m["schema"] == 1
        assert {"phase", "index", "layer", "sub_block", "op", "rank", "tensors"} <= set(m)
        for t in m["tensors"]:
            assert t["role"] in ("input", "param", "output")
            assert t["dtype"] in ("bfloat16", "float32")
            assert len(t["digest"]) == 64 and all(ch in "0123456789abcdef" for ch in t["digest"])
        roles = {t["name"]: t["role"] for t in m["tensors"]}
        if m["op"] == "allreduce":
            assert roles == {"x": "input", "out": "output"}
        else:
            assert roles["fn"] == roles["base"] == roles["scale"] == "param"
            assert roles["streams"] == roles["y"] == "output"


def test_inspect_reports_dedup(tiny_corpus, shell):
    res = shell("inspect", tiny_corpus, "--json")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    ms = manifests_on_disk(tiny_corpus)
    refs = [t for m in ms.values() for t in m["tensors"]]
    assert rep["manifests"] == len(ms)
    assert rep["tensor_refs"] == len(refs)
    assert rep["unique_blobs"] == len({t["digest"] for t in refs}) == len(blob_files(tiny_corpus))
    assert rep["missing_blobs"] == rep["unreferenced_blobs"] == 0
    assert rep["dedup_ratio"] == pytest.approx(rep["referenced_bytes"] / rep["unique_bytes"])
    assert rep["dedup_ratio"] > 1.0
    assert rep["stored_bytes"] == sum(p.stat().st_size for p in blob_files(tiny_corpus).values())


# --- reads are checked and bounded -------------------------------------------------------------
def _stored(frame: bytes) -> bytes:
    """A zstd frame in the store's on-disk form: the frame, then the trailer with its blake3."""
    from decoder_shell.corpus.blobs import TRAILER, TRAILER_MAGIC
    import blake3
    return frame + TRAILER.pack(TRAILER_MAGIC, 32, blake3.blake3(frame).digest())


def test_get_checks_the_digest(tmp_path):
    store = BlobStore(tmp_path)
    d, _ = store.put(b"\x01" * 64)
    other = _stored(zstandard.ZstdCompressor().compress(b"\x02" * 64))
    store.path(d).write_bytes(other)
    with pytest.raises(CorpusError, match="does not match its digest") as e:
        store.get(d, 64)
    assert str(store.path(d)) in str(e.value)


@pytest.mark.parametrize("declared", [63, 65])
def test_get_refuses_a_size_other_than_declared(tmp_path, declared):
    store = BlobStore(tmp_path)
    d, _ = store.put(b"\x01" * 64)
    with pytest.raises(CorpusError) as e:
        store.get(d, declared)
    assert str(store.path(d)) in str(e.value)


def test_get_without_content_size_short_frame(tmp_path):
    """A frame that does not declare its size and holds fewer bytes than the manifest says."""
    store = BlobStore(tmp_path)
    d, _ = store.put(b"\x01" * 64)
    store.path(d).write_bytes(_stored(zstandard.ZstdCompressor(write_content_size=False).compress(b"\x01" * 60)))
    with pytest.raises(CorpusError, match="does not declare its size"):
        store.get(d, 64)


@pytest.mark.parametrize("digest", ["../" + "0" * 61, "0" * 63, "0" * 65, "G" * 64, "A" * 64,
                                    "0" * 62 + "/a", "", None, 123])
def test_digest_must_be_64_lowercase_hex(tmp_path, digest):
    with pytest.raises(CorpusError):
        BlobStore(tmp_path).path(digest)


def _bomb(path: Path, nbytes: int) -> None:
    """A zstd frame that does not declare its size and inflates to `nbytes` zero bytes."""
    c = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    chunk = b"\0" * (1 << 20)
    parts = [c.compress(chunk) for _ in range(nbytes >> 20)]
    parts.append(c.flush())
    path.write_bytes(b"".join(parts))


def test_decompression_is_bounded_by_the_declared_size(tmp_path):
    """A 1 GiB zip bomb in place of a 512-byte blob: a clear error, quickly, without inflating it.
    Run in a fresh interpreter so its peak memory can be measured."""
    store = BlobStore(tmp_path)
    d, _ = store.put(b"\x07" * 512)
    _bomb(store.path(d), 1 << 30)
    code = f"""
import sys, time
sys.path.insert(0, {str(REPO)!r})
from decoder_shell.corpus.blobs import BlobStore
from decoder_shell.errors import CorpusError
t = time.perf_counter()
try:
    BlobStore({str(tmp_path)!r}).get({d!r}, 512)
    print("accepted")
except CorpusError as e:
    print("error", e)
dt = time.perf_counter() - t
# VmHWM: this process's peak resident set (ru_maxrss would include the parent's before exec)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(hwm, dt)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = p.stdout.splitlines()
    assert p.returncode == 0, p.stderr
    assert lines[0].startswith("error ") and str(store.path(d)) in lines[0]
    rss_kb, seconds = lines[1].split()
    assert int(rss_kb) < 300 * 1024, f"peak RSS {int(rss_kb) // 1024} MiB while rejecting a bomb"
    assert float(seconds) < 5


def test_bomb_in_a_corpus_is_a_one_line_error(corpus_copy, shell):
    ms = manifests_on_disk(corpus_copy)
    d = digests(ms[("verify", 0, 1)])["fn"]
    path = corpus_copy / "blobs" / d[:2] / f"{d}.zst"
    _bomb(path, 256 << 20)
    for cmd in (["verify", corpus_copy], ["replay", corpus_copy, "--driver", "cpu", "--epochs", "1"]):
        assert_one_line_error(shell(*cmd), 2, path)


def test_huge_declared_size_without_content_size_is_an_error_not_a_crash(corpus_copy, shell):
    """A corpus.json declaring an absurd hidden size (2**40) with a frame that does not declare its
    size is a one-line corpus error (exit 2): geometry bounds refuse it before any allocation."""
    h = 2 ** 40
    cj = json.loads((corpus_copy / "corpus.json").read_text())
    cj["geometry"]["hidden"] = h
    (corpus_copy / "corpus.json").write_text(json.dumps(cj))
    mp = corpus_copy / "manifests" / "draft" / "r0" / "0000-allreduce.json"
    m = json.loads(mp.read_text())
    for t in m["tensors"]:
        t["shape"] = [1, h]
    mp.write_text(json.dumps(m))
    d = m["tensors"][0]["digest"]
    (corpus_copy / "blobs" / d[:2] / f"{d}.zst").write_bytes(
        zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * 100))
    assert_one_line_error(shell("verify", corpus_copy), 2)


def test_blob_symlink_out_of_the_corpus_is_refused(corpus_copy, tmp_path, shell):
    ms = manifests_on_disk(corpus_copy)
    d = digests(ms[("verify", 0, 0)])["x"]
    path = corpus_copy / "blobs" / d[:2] / f"{d}.zst"
    outside = tmp_path / "outside.zst"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    assert_one_line_error(shell("verify", corpus_copy), 2, path)


def test_manifest_symlink_out_of_the_corpus_is_refused(corpus_copy, tmp_path, shell):
    """A manifest symlinked out of the corpus is refused, like a symlinked blob (DESIGN 5: a path
    that escapes the corpus is an error)."""
    path = corpus_copy / "manifests" / "verify" / "r0" / "0003-mhc_post_pre.json"
    outside = tmp_path / "m.json"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    assert_one_line_error(shell("verify", corpus_copy), 2, path)


def test_corpus_open_errors_name_the_file(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        Corpus.open(tmp_path / "nope")
    with pytest.raises(CorpusError, match="corpus.json"):
        Corpus.open(tmp_path)
    (tmp_path / "corpus.json").write_text("{not json")
    with pytest.raises(CorpusError, match="not valid JSON"):
        Corpus.open(tmp_path)
    (tmp_path / "corpus.json").write_text(json.dumps({"format": "decoder-shell-corpus", "schema": 1,
                                                      "geometry": {"hidden": -1}}))
    with pytest.raises(CorpusError, match="malformed"):
        Corpus.open(tmp_path)


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    g = preset("tiny", tp=2)
    synth(g, tmp_path / "c")
    leftovers = [p for p in (tmp_path / "c").rglob("*") if p.name.startswith(".") or p.suffix == ".tmp"]
    assert leftovers == []
