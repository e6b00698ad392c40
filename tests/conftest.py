"""Shared fixtures: the `shell` CLI as a real subprocess, synthesized corpora, and the naive scalar
references the contract tests compare against.

The naive references follow docs/CONTRACTS.md (and the contracts' docstrings) element by element with
numpy float32 scalars, one IEEE operation at a time. They are deliberately slow and share no code
with decoder_shell.contracts: a vectorized contract that disagrees with them on any bit is wrong (or
its documentation is).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHIPPED_CORPUS = REPO / "decoder_shell" / "data" / "corpus"  # also reachable as ./corpus


# --- the CLI as a subprocess -------------------------------------------------------------------
@dataclass
class ShellRun:
    args: tuple
    returncode: int
    stdout: str
    stderr: str

    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def run_shell(*args, cwd=None, timeout=600) -> ShellRun:
    """Run `python -m decoder_shell.cli ARGS` in a fresh interpreter, as a user would."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["COLUMNS"] = "160"  # help text wraps at the terminal's width: the same width in every process (xdist workers too)
    p = subprocess.run([sys.executable, "-m", "decoder_shell.cli", *map(str, args)], cwd=cwd or REPO,
                       env=env, capture_output=True, text=True, timeout=timeout)
    return ShellRun(tuple(map(str, args)), p.returncode, p.stdout, p.stderr)


def assert_one_line_error(res: ShellRun, code: int, names: str | Path | None = None) -> str:
    """Exit `code`, exactly one non-empty stderr line, no traceback, naming `names` when given."""
    lines = res.stderr_lines()
    assert res.returncode == code, f"{res.args}: exit {res.returncode}, stderr:\n{res.stderr}"
    assert len(lines) == 1, f"{res.args}: expected one stderr line, got:\n{res.stderr}"
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    if names is not None:
        assert str(names) in lines[0], f"{res.args}: {lines[0]!r} does not name {names}"
    return lines[0]


def reseal(root: Path) -> None:
    """Seal a corpus again after a test changed it on purpose (as a writer of that content would have),
    so the checks behind the seal (links, parity, contract) are what the test exercises."""
    import json

    from decoder_shell.corpus.store import Corpus, CorpusInfo, seal
    from decoder_shell.geometry import Geometry
    path = Path(root) / "corpus.json"
    d = json.loads(path.read_text())
    d["manifests"] = Corpus(Path(root), CorpusInfo(Geometry.from_json(d["geometry"]))).manifest_digests()
    d["digest"] = seal(d)
    path.write_text(json.dumps(d, indent=1, sort_keys=True) + "\n")


@pytest.fixture(scope="session")
def shell():
    return run_shell


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """A tiny TP2 corpus made by `shell synth` (read-only by convention: copy before changing it)."""
    out = tmp_path_factory.mktemp("tiny") / "corpus"
    res = run_shell("synth", "--preset", "tiny", "--tp", "2", "--out", out)
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture
def corpus_copy(tiny_corpus, tmp_path) -> Path:
    """A private, writable copy of the tiny corpus."""
    dst = tmp_path / "corpus"
    shutil.copytree(tiny_corpus, dst)
    return dst


# --- naive scalar references -------------------------------------------------------------------
f32 = np.float32
BF16 = np.dtype(ml_dtypes.bfloat16)

# The portable exp, constants as docs/CONTRACTS.md states them.
EXP_LO, EXP_HI = f32(-87.0), f32(88.0)
LOG2E = f32(1.44269502162933349609375)
MAGIC = f32(1.5 * 2.0 ** 23)
LN2_HI = f32(0.693359375)
LN2_LO = f32(-2.12194440e-4)
POLY = [f32(1.0 / math.factorial(k)) for k in range(7, -1, -1)]


def _fmin(a, b):
    """C fminf: a NaN operand loses to the other one."""
    if a != a:
        return b
    if b != b:
        return a
    return a if a < b else b


def _fmax(a, b):
    if a != a:
        return b
    if b != b:
        return a
    return a if a > b else b


def n_bf16(v) -> np.uint16:
    """fp32 -> bf16 bits, round to nearest even, by integer arithmetic on the bit pattern."""
    u = int(np.array([v], dtype=np.float32).view(np.uint32)[0])
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF):
        return np.uint16((u >> 16) & 0x8000 | 0x7FC0)  # NaN: quiet, sign kept (ml_dtypes' choice)
    lsb = (u >> 16) & 1
    return np.uint16(((u + 0x7FFF + lsb) >> 16) & 0xFFFF)


def n_bf16_value(v) -> np.float32:
    """The fp32 value of bf16-rounded v."""
    return np.array([int(n_bf16(v)) << 16], dtype=np.uint32).view(np.float32)[0]


def n_lane_sum(terms, lanes: int) -> np.float32:
    """Lane l adds terms l, l+lanes, ... in order onto +0.0; then an adjacent-pair tree over lanes."""
    acc = [f32(0.0) for _ in range(lanes)]
    for lane in range(lanes):
        i = lane
        while i < len(terms):
            acc[lane] = f32(acc[lane] + f32(terms[i]))
            i += lanes
    while len(acc) > 1:
        acc = [f32(acc[2 * i] + acc[2 * i + 1]) for i in range(len(acc) // 2)]
    return acc[0]


def n_seq(terms) -> np.float32:
    """((t0 + t1) + t2) + ..., starting from the first term."""
    acc = f32(terms[0])
    for t in terms[1:]:
        acc = f32(acc + f32(t))
    return acc


def n_sqrt(v) -> np.float32:
    # A correctly rounded double sqrt, then rounded to fp32, is the correctly rounded fp32 sqrt.
    v = float(v)
    return f32(math.sqrt(v)) if v >= 0 else f32(float("nan"))


def n_pexp(x) -> np.float32:
    x = f32(x)
    x = _fmax(_fmin(x, EXP_HI), EXP_LO)
    n = f32(f32(f32(x * LOG2E) + MAGIC) - MAGIC)
    r = f32(f32(x - f32(n * LN2_HI)) - f32(n * LN2_LO))
    p = POLY[0]
    for c in POLY[1:]:
        p = f32(f32(p * r) + c)
    return f32(p * f32(2.0 ** int(n)))


def n_psigmoid(z) -> np.float32:
    return f32(f32(1.0) / f32(f32(1.0) + n_pexp(-f32(z))))


def n_mixes_row(x, fn, norm_eps, lanes=1024):
    """x: flat list of fp32 (stream-major), fn: 2-D array [O, N]."""
    n = len(x)
    ss = n_lane_sum([f32(v * v) for v in x], lanes)
    r = f32(f32(1.0) / n_sqrt(f32(f32(ss / f32(n)) + f32(norm_eps))))
    return [f32(n_lane_sum([f32(x[i] * f32(fn[o][i])) for i in range(n)], lanes) * r) for o in range(len(fn))]


def n_sinkhorn(logits, hc, eps, iters):
    eps = f32(eps)
    comb = [[f32(0.0)] * hc for _ in range(hc)]
    for j in range(hc):
        mx = logits[j][0]
        for k in range(1, hc):
            mx = mx if mx >= logits[j][k] else logits[j][k]
        e = [n_pexp(f32(logits[j][k] - mx)) for k in range(hc)]
        s = n_seq(e)
        for k in range(hc):
            comb[j][k] = f32(f32(e[k] / s) + eps)

    def cols():
        for k in range(hc):
            cs = f32(n_seq([comb[j][k] for j in range(hc)]) + eps)
            for j in range(hc):
                comb[j][k] = f32(comb[j][k] / cs)

    def rows():
        for j in range(hc):
            rs = f32(n_seq(comb[j]) + eps)
            for k in range(hc):
                comb[j][k] = f32(comb[j][k] / rs)

    cols()
    for _ in range(iters - 1):
        rows()
        cols()
    return comb


def n_split_row(mixes, base, scale, hc, hc_eps, iters):
    eps = f32(hc_eps)
    pre = [f32(n_psigmoid(f32(f32(mixes[h] * f32(scale[0])) + f32(base[h]))) + eps) for h in range(hc)]
    post = [f32(f32(2.0) * n_psigmoid(f32(f32(mixes[hc + h] * f32(scale[1])) + f32(base[hc + h]))))
            for h in range(hc)]
    logits = [[f32(f32(mixes[2 * hc + j * hc + k] * f32(scale[2])) + f32(base[2 * hc + j * hc + k]))
               for k in range(hc)] for j in range(hc)]
    return pre, post, n_sinkhorn(logits, hc, eps, iters)


def n_collapse_row(pre, streams_row):
    """streams_row: [hc][D] fp32 values -> D bf16 bit patterns."""
    hc, d = len(streams_row), len(streams_row[0])
    return [n_bf16(n_seq([f32(pre[h] * streams_row[h][i]) for h in range(hc)])) for i in range(d)]


def n_post_row(x, residual, post, comb):
    """x: [D], residual: [hc][D], post: [hc], comb: [hc][hc] -> [hc][D] bf16 bits."""
    hc, d = len(residual), len(x)
    out = [[None] * d for _ in range(hc)]
    for k in range(hc):
        for i in range(d):
            mix = n_seq([f32(f32(comb[j][k]) * residual[j][i]) for j in range(hc)])
            out[k][i] = n_bf16(f32(f32(f32(post[k]) * x[i]) + mix))
    return out


def bits_to_f32(bits16) -> np.float32:
    return np.array([int(bits16) << 16], dtype=np.uint32).view(np.float32)[0]


def n_pre_stage(streams_row, fn, base, scale, hc, p):
    """hc_pre on one row of bf16 streams (given as [hc][D] fp32 values)."""
    flat = [v for h in range(hc) for v in streams_row[h]]
    mixes = n_mixes_row(flat, fn, p.norm_eps)
    pre, post, comb = n_split_row(mixes, base, scale, hc, p.hc_eps, p.sinkhorn_iters)
    return n_collapse_row(pre, streams_row), post, comb


def n_head_stage(streams_row, fn, base, scale, hc, p):
    flat = [v for h in range(hc) for v in streams_row[h]]
    mixes = n_mixes_row(flat, fn, p.norm_eps)
    pre = [f32(n_psigmoid(f32(f32(mixes[h] * f32(scale[0])) + f32(base[h]))) + f32(p.hc_eps)) for h in range(hc)]
    return n_collapse_row(pre, streams_row)


def n_rmsnorm_row(x, w, eps, lanes=1024):
    d = len(x)
    ss = n_lane_sum([f32(v * v) for v in x], lanes)
    r = f32(f32(1.0) / n_sqrt(f32(f32(ss / f32(d)) + f32(eps))))
    return [n_bf16(f32(f32(x[i] * r) * f32(w[i]))) for i in range(d)]


def n_fold_orders(n, ranks, itemsize, chunks_per_rank=1, max_chunk_bytes=0, offset=0, direction=1,
                  segments=1):
    """Per element, the rank fold order, from the documented segment/chunk/owner/offset/direction rules."""
    orders = []
    seg_size = -(-n // segments) if n else 0
    for e in range(n):
        s = e // seg_size
        lo = s * seg_size
        m = min(lo + seg_size, n) - lo
        i = e - lo
        chunks = chunks_per_rank * ranks
        if max_chunk_bytes:
            per = max(1, max_chunk_bytes // itemsize)  # the bound in whole elements, as documented
            chunks = max(-(-m // per), chunks)
        chunks = -(-chunks // ranks) * ranks
        size = -(-m // chunks)
        chunk = i // size
        owner = chunk // (chunks // ranks)
        start = (owner + offset) % ranks
        orders.append([(start + t * direction) % ranks for t in range(ranks)])
    return orders


def n_allreduce(xs, dtype, accumulation="hop", **contract):
    """xs: R flat lists of values (already representable in `dtype`); returns result bit patterns."""
    ranks, n = len(xs), len(xs[0])
    itemsize = np.dtype(dtype).itemsize
    hop = accumulation == "hop"
    out = []
    for e, order in enumerate(n_fold_orders(n, ranks, itemsize, **contract)):
        acc = f32(xs[order[0]][e])
        for r in order[1:]:
            acc = f32(acc + f32(xs[r][e]))
            if hop and itemsize == 2:
                acc = n_bf16_value(acc)
        if itemsize == 2:
            out.append(int(n_bf16(acc)))
        else:
            out.append(int(np.array([acc], np.float32).view(np.uint32)[0]))
    return out


class _Naive(SimpleNamespace):
    def __repr__(self):
        return "naive"


NAIVE = _Naive(
    f32=f32, bf16=n_bf16, bf16_value=n_bf16_value, bits_to_f32=bits_to_f32, lane_sum=n_lane_sum,
    seq=n_seq, sqrt=n_sqrt, pexp=n_pexp, psigmoid=n_psigmoid, mixes_row=n_mixes_row,
    sinkhorn=n_sinkhorn, split_row=n_split_row, collapse_row=n_collapse_row, post_row=n_post_row,
    pre_stage=n_pre_stage, head_stage=n_head_stage, rmsnorm_row=n_rmsnorm_row,
    fold_orders=n_fold_orders, allreduce=n_allreduce,
    consts=SimpleNamespace(EXP_LO=EXP_LO, EXP_HI=EXP_HI, LOG2E=LOG2E, MAGIC=MAGIC, LN2_HI=LN2_HI,
                           LN2_LO=LN2_LO, POLY=POLY),
)


@pytest.fixture(scope="session")
def naive():
    """Naive scalar references of every contract (see the module docstring)."""
    return NAIVE


def assert_level_zero_replays_exact(paths) -> None:
    """Every corpus in `paths` replays on the level-zero driver (graph and changed epochs) with every output
    of every rank bit-exact. Skips where the driver is unavailable, except under CI, which builds it."""
    import json

    import pytest

    from decoder_shell.drivers.level_zero import LevelZeroDriver
    from decoder_shell.errors import DriverUnavailable
    try:
        LevelZeroDriver().target
    except DriverUnavailable as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"level-zero driver unavailable here: {e}")
    for path in paths:
        r = run_shell("replay", path, "--driver", "level-zero", "--epochs", "2", "--changed", "2", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["exact"]
