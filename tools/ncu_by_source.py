"""Adds up one Nsight Compute launch of the cluster cycle by source line and by function: each SASS
instruction's executions and stall samples (`ncu --page source --csv --print-source sass`, as
tools/gpu_cluster_ncu.sh writes it) placed on its line through the cubin's line table (`nvdisasm -g` of the
build compiled with DECODER_SHELL_CUDA_LINEINFO=1, whose SASS is the build's own). The lines are the kernel's
source as this tree makes it (cluster_cycle.source), so run it on the tree that was profiled.

    python tools/ncu_by_source.py --csv m8/sass.csv.gz --sass r8.sass.txt.gz --rows 8 [--ranks 4] [--steps 87]

"per SMSP and step" divides the executions by steps x blocks x 4 schedulers: instructions one scheduler
issues a step, against the step's time at one instruction a cycle."""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoder_shell.drivers.cuda import cluster_cycle as cc  # noqa: E402

FUNC = re.compile(r"^(?:template.*)?(?:__device__|__global__|extern|static).*?(\w+)\s*\(")


def opener(path: Path):
    return gzip.open(path, "rt") if path.suffix == ".gz" else open(path)


def line_table(path: Path) -> dict[int, int]:
    """SASS offset -> source line, from nvdisasm -g's `//## File ..., line N` comments."""
    table, line = {}, 0
    with opener(path) as f:
        for text in f:
            if "//## File" in text and (m := re.search(r"line (\d+)", text)):
                line = int(m.group(1))
            elif m := re.match(r"\s+/\*([0-9a-f]{4,})\*/\s", text):
                table[int(m.group(1), 16)] = line
    return table


def read_profile(path: Path) -> tuple[list[str], list[list[str]]]:
    """The source page's header and its instruction rows (address first, in address order)."""
    with opener(path) as f:
        r = csv.reader(f)
        next(r)  # the kernel's name
        head = next(r)
        return head, [x for x in r if len(x) == len(head)]


def by_line(csv_path: Path, sass_path: Path) -> tuple[collections.Counter, collections.Counter, int, int]:
    """Executions and stall samples a source line (0: an instruction the line table does not place), how many
    of the profile's instructions the table placed, and how many it holds."""
    table = line_table(sass_path)
    head, rows = read_profile(csv_path)
    col = {k: i for i, k in enumerate(head)}
    base = int(rows[0][0], 16)
    ex, sa, placed = collections.Counter(), collections.Counter(), 0
    for x in rows:
        off = int(x[0], 16) - base
        placed += off in table
        ln = table.get(off, 0)
        ex[ln] += int(x[col["Instructions Executed"]] or 0)
        sa[ln] += int(x[col["Warp Stall Sampling (All Samples)"]] or 0)
    return ex, sa, placed, len(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", type=Path, required=True)
    ap.add_argument("--sass", type=Path, required=True)
    ap.add_argument("--rows", type=int, required=True, help="rows a cluster of the profiled build")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--q", type=int, default=4, help="hidden size / 1024")
    ap.add_argument("--steps", type=int, default=87)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    src, _ = cc.source(args.q, args.rows, cc.THREADS, args.ranks)
    lines = src.split("\n")
    func, cur = [""] * (len(lines) + 2), ""
    for i, text in enumerate(lines, 1):
        if (m := FUNC.match(text)) and not text.strip().endswith(";"):
            cur = m.group(1)
        func[i] = cur
    ex, sa, placed, n = by_line(args.csv, args.sass)
    blocks = args.ranks * cc.CL_SIZE
    fex, fsa = collections.Counter(), collections.Counter()
    for ln in ex:
        fex[func[ln]] += ex[ln]
        fsa[func[ln]] += sa[ln]
    te, ts = sum(ex.values()) or 1, sum(sa.values()) or 1
    per = args.steps * blocks * 4
    print(f"{n} SASS instructions, {placed} on a line; "
          f"{te} executed, {te / per:.0f} per SMSP and step")
    print("function: executions %, stall samples %, per SMSP and step")
    for k, v in fex.most_common(25):
        print(f"  {k:32s} {100 * v / te:5.1f}% {100 * fsa[k] / ts:5.1f}% {v / per:7.0f}")
    print("line: executions %, stall samples % [function] source")
    for k, v in ex.most_common(args.top):
        print(f"  {k:5d} {100 * v / te:5.1f}% {100 * sa[k] / ts:5.1f}% [{func[k]}] {lines[k - 1].strip()[:100] if k else ''}")


if __name__ == "__main__":
    main()
