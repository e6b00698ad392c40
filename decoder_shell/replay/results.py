"""The one result schema shared by replay, gate and verify output (docs/RESULTS.md).

Every JSON result carries a `run` block: what produced it (tool version and commit), where (host,
device, driver and runtime versions), on what (corpus path and digest, geometry) and when. Timing
statistics are the same everywhere (`stats`), and every epoch's per-rank samples travel with them,
so a result can be re-plotted, compared or exported (`to_csv`) without rerunning anything.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from ..errors import UsageError

#: Version of the `run` block and of the statistics' keys; bump on any change a reader must know.
RESULT_SCHEMA = 1
PERCENTILES = (1, 10, 25, 50, 75, 90, 99)
MAX_RESULT_BYTES = 256 * 2**20
CSV_COLUMNS = ("result", "side", "kind", "epoch", "rank", "time_ms", "cycle_ms", "mismatches")


def stats(values) -> dict:
    """n, min, max, mean, sample stddev, median and percentiles (numpy's linear interpolation)."""
    a = np.asarray(list(values), dtype=np.float64)
    if not a.size:
        return {"n": 0, "min": None, "max": None, "mean": None, "stddev": None, "median": None,
                **{f"p{p}": None for p in PERCENTILES if p != 50}}
    out = {"n": int(a.size), "min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()),
           "stddev": float(a.std(ddof=1)) if a.size > 1 else 0.0, "median": float(np.median(a))}
    out.update({f"p{p}": float(np.percentile(a, p)) for p in PERCENTILES if p != 50})
    return out


def corpus_digest(root: Path) -> dict:
    """The corpus's own digest where corpus.json records one, else the blake3 of corpus.json (which
    names the geometry, contract and counts; the manifests and blobs are digest-checked on every read)."""
    import blake3
    path = Path(root) / "corpus.json"
    try:
        raw = path.read_bytes()
    except OSError:
        return {"digest": None, "of": None}
    try:
        own = json.loads(raw).get("digest")
    except (ValueError, AttributeError):
        own = None
    if isinstance(own, str) and own:
        return {"digest": own, "of": "corpus"}
    if isinstance(own, dict) and own.get("value"):
        return {"digest": own["value"], "of": own.get("of", "corpus")}
    return {"digest": blake3.blake3(raw).hexdigest(), "of": "corpus.json"}


def run_block(kind: str, corpus, driver=None) -> dict:
    """The provenance every result carries (`kind`: replay | gate | verify)."""
    from ..about import environment
    env = environment(driver)
    return {"schema": RESULT_SCHEMA, "kind": kind, **env,
            "corpus": {"path": str(corpus.root), **corpus_digest(corpus.root)},
            "geometry": corpus.geometry.to_json()}


def epoch_rows(result: dict):
    """(side, epoch dict) of a replay result or a gate verdict, in run order."""
    if result.get("format") == "decoder-shell-gate-verdict":
        for side in ("baseline", "candidate"):
            for e in result["epochs"].get(side, []):
                yield side, e
    else:
        for e in result["epochs"]:
            yield "replay", e


def to_csv(result: dict) -> str:
    """One row per epoch and rank: every sample of the result, ready for a spreadsheet or pandas."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    what = result.get("run", {}).get("kind", "replay")
    for side, e in epoch_rows(result):
        for r, t in enumerate(e["times_ms"]):
            w.writerow((what, side, e["kind"], e["index"], r, repr(float(t)), repr(float(e["cycle_ms"])),
                        e["mismatches"][r]))
    return buf.getvalue()


def write_csv(result: dict, path: Path) -> None:
    from ..atomic import write_atomic
    try:
        write_atomic(Path(path), to_csv(result).encode())
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def load_result(path: Path) -> dict:
    """Read a saved result (replay or gate JSON); one-line UsageError naming the file otherwise.
    Bounded: a result is at most a few MiB; a larger file is refused before it is parsed."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_RESULT_BYTES:
            raise UsageError(f"{path}: {size / 2**20:.1f} MiB is too large for a result file")
        v = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such result file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read ({e})") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(v, dict):
        raise UsageError(f"{path}: not a replay result or gate verdict")
    return v
