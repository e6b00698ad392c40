"""Several writer processes at once: overlapping blobs, a whole corpus written rank by rank in
parallel, and a reader that must never see a partial blob."""

from __future__ import annotations

import multiprocessing as mp
import random
import time
from pathlib import Path

import blake3
import numpy as np

from decoder_shell.commands.program import build_cycle, reference
from decoder_shell.contracts.allreduce import RingContract
from decoder_shell.corpus.blobs import BlobStore
from decoder_shell.corpus.store import Corpus
from decoder_shell.corpus.synth import injected_values, synth
from decoder_shell.corpus.verify import verify
from decoder_shell.errors import CorpusError
from decoder_shell.geometry import preset

from conftest import run_shell

BLOBS = 160
BLOB_BYTES = 48 * 1024
WRITERS = 4


def payload(i: int) -> bytes:
    """Blob i: incompressible bytes, the same in every process."""
    return np.random.default_rng([1234, i]).bytes(BLOB_BYTES)


def writer(root: str, order_seed: int, barrier, out):
    store = BlobStore(Path(root))
    order = list(range(BLOBS))
    random.Random(order_seed).shuffle(order)
    barrier.wait()
    got = {}
    for i in order:
        got[i] = store.put(payload(i))
    out.put((order_seed, got))


def reader(root: str, digests: list, barrier, stop, out):
    """Reads every blob over and over while writers run: a blob is either missing or whole."""
    store = BlobStore(Path(root))
    seen_whole, seen_missing, bad = 0, 0, []
    barrier.wait()
    while not stop.is_set() or seen_whole < len(digests):
        for i, d in enumerate(digests):
            try:
                data = store.get(d, BLOB_BYTES)
            except CorpusError as e:
                if "missing" in str(e):
                    seen_missing += 1
                else:
                    bad.append(str(e))
                continue
            if data != payload(i):
                bad.append(f"blob {i}: wrong bytes")
            seen_whole += 1
        if stop.is_set() and seen_whole >= len(digests):
            break
    out.put(("reader", seen_whole, seen_missing, bad))


def test_concurrent_writers_of_overlapping_blobs(tmp_path):
    ctx = mp.get_context("spawn")
    digests = [blake3.blake3(payload(i)).hexdigest() for i in range(BLOBS)]
    barrier = ctx.Barrier(WRITERS + 1)
    stop = ctx.Event()
    out = ctx.Queue()
    procs = [ctx.Process(target=writer, args=(str(tmp_path), s, barrier, out)) for s in range(WRITERS)]
    procs.append(ctx.Process(target=reader, args=(str(tmp_path), digests, barrier, stop, out)))
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in range(WRITERS)]
    stop.set()
    read = out.get(timeout=300)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0

    for _, got in results:
        assert [got[i][0] for i in range(BLOBS)] == digests
    # every blob was written at least once; a blob may be written by more than one racing writer
    for i in range(BLOBS):
        assert sum(got[i][1] for _, got in results) >= 1
    _, whole, missing, bad = read
    assert bad == [], bad[:5]
    assert whole >= BLOBS

    store = BlobStore(tmp_path)
    assert sorted(store.digests()) == sorted(digests)
    for i, d in enumerate(digests):
        assert store.get(d, BLOB_BYTES) == payload(i)
    assert [p for p in tmp_path.rglob("*") if p.is_file() and not p.name.endswith(".zst")] == []


def rank_writer(root: str, g, rank: int, seed: int, barrier, out):
    """One rank process of a capture: writes its own manifests; params are the same on every rank,
    so the rank processes race to store the same param blobs."""
    corpus = Corpus.create(Path(root), g, {"kind": "synth", "seed": seed}, RingContract(), how="synth")
    cyc = build_cycle(corpus.geometry, corpus.info.contract())
    values = reference(cyc, injected_values(cyc, seed))
    barrier.wait()
    for cmd in cyc.commands:
        corpus.write(cmd.boundary, rank, {n: values[rank][b] for n, b in cyc.tensor_buffers(cmd).items()})
    out.put(rank)


def test_rank_processes_write_one_corpus_at_once(tmp_path):
    g = preset("tiny", tp=4, verify_rows=2, draft_rows=1)
    root = tmp_path / "parallel"
    root.mkdir()
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(g.ranks)
    out = ctx.Queue()
    procs = [ctx.Process(target=rank_writer, args=(str(root), g, r, 3, barrier, out)) for r in range(g.ranks)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    done = sorted(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert done == list(range(g.ranks))
    assert time.perf_counter() - t0 < 300

    Corpus.create(root, g, {"kind": "synth", "seed": 3}, RingContract(), how="synth").finalize()
    corpus = Corpus.open(root)
    rep = verify(corpus)
    assert rep["ok"] and rep["linked"] and rep["cross_rank_exact"] and rep["parity_exact"]

    # identical, file for file, to the same corpus written by one process
    serial = tmp_path / "serial"
    synth(g, serial, seed=3)
    files = lambda r: {p.relative_to(r): p.read_bytes() for p in r.rglob("*")  # noqa: E731
                       if p.is_file() and p.name != "corpus.json"}
    assert files(root) == files(serial)
    assert corpus.info.counts["blobs"] == Corpus.open(serial).info.counts["blobs"]

    res = run_shell("verify", root)
    assert res.returncode == 0, res.stderr
