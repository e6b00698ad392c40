"""tools/ncu_by_source.py on a real Nsight Compute launch of the cluster cycle (H100, TP4 M=2 and M=8, kept in
docs/results/2026-12-06-h100-s27/callA/ncu with the cubins' nvdisasm -g listings): every profiled instruction is
placed on a source line, no execution or stall sample is lost or counted twice, and the line table agrees with
the listing's own line comments."""

from __future__ import annotations

import csv
import gzip
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

import ncu_by_source as nbs  # noqa: E402

NCU = REPO / "docs/results/2026-12-06-h100-s27/callA/ncu"
CASES = [("m2", "r2"), ("m8", "r8")]


def column_sum(path: Path, name: str) -> tuple[int, int]:
    with gzip.open(path, "rt") as f:
        r = csv.reader(f)
        next(r)
        head = next(r)
        rows = [x for x in r if len(x) == len(head)]
    i = head.index(name)
    return sum(int(x[i] or 0) for x in rows), len(rows)


@pytest.mark.parametrize("prof,cubin", CASES)
def test_every_instruction_on_a_line_and_nothing_lost(prof, cubin):
    csv_path, sass = NCU / prof / "sass.csv.gz", NCU / f"{cubin}.sass.txt.gz"
    ex, sa, placed, _ = nbs.by_line(csv_path, sass)
    executed, n = column_sum(csv_path, "Instructions Executed")
    samples, _ = column_sum(csv_path, "Warp Stall Sampling (All Samples)")
    assert placed == n > 1000
    assert sum(ex.values()) == executed > 0
    assert sum(sa.values()) == samples > 0
    assert ex[0] == 0  # (line 0: an instruction the table did not place)


@pytest.mark.parametrize("cubin", ["r2", "r8"])
def test_line_table_follows_the_listing(cubin):
    path = NCU / f"{cubin}.sass.txt.gz"
    table = nbs.line_table(path)
    # read the listing again by hand: the line in force at each offset
    expect, line = {}, None
    with gzip.open(path, "rt") as f:
        for text in f:
            m = re.search(r'//## File ".*", line (\d+)', text)
            if m:
                line = int(m.group(1))
            m = re.match(r"\s+/\*([0-9a-f]+)\*/", text)
            if m and line is not None:
                expect[int(m.group(1), 16)] = line
    assert table == expect and len(table) > 1000
    offsets = sorted(table)
    assert offsets[0] == 0 and all(b - a == 16 for a, b in zip(offsets, offsets[1:]))  # sm_90: 16 bytes each
