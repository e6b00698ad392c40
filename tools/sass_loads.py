"""Global loads of the cluster cycle whose value is used within a few instructions, from its SASS (no GPU).

A load the next instructions read stalls its warp for the load's round trip (an L2 hit is ~0.5 us under the
cycle's traffic): once every step where it sits on a warp's way to a barrier. Two such loads (a prefetch's address
predicated on a loaded flag at the head of the stream values, another used between the rank's barrier and a
publish) cost the H200 ~0.01 ms a cycle at TP4 M=2 and ~0.05 at M=4 (docs/BENCHMARKS.md, fourteenth session). This lists every
load (LDG, or a generic LD) whose destination register is read within --within instructions, in code order, with
the instruction that reads it: the poll loads of the fold and the residual's loads of an uncarried step are meant
to be waited for; anything else is a candidate. Builds with the driver's flags on this machine's NVRTC for sm_90
(the device's NVRTC may schedule differently) and disassembles with nvdisasm (the test extra).

    python tools/sass_loads.py [--q 4] [--rows 2] [--threads 512] [--ranks 4] [--within 24] [--defines "CL_X=1 ..."]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoder_shell.drivers.cuda.cluster_cycle import source  # noqa: E402
from decoder_shell.drivers.cuda.nvrtc import (EXACT_FLAGS, compile_cubin, disassemble,  # noqa: E402
                                              sass_instructions, sass_opcode)

REG = re.compile(r"\bR(\d+)\b")


def early_uses(code: list[tuple[str, str]], within: int) -> list[tuple[str, str, int, str]]:
    """Every global or generic load whose destination is read within `within` instructions: (offset, load,
    distance, reader). A register written again before any read ends the search."""
    out = []
    for i, (off, ins) in enumerate(code):
        op, args = sass_opcode(ins)
        if not (op.startswith("LDG") or op == "LD" or op.startswith("LD.")):
            continue
        dst = REG.findall(args.split(",")[0])
        if not dst:
            continue
        wide = 2 if ".64" in op else 4 if ".128" in op else 1
        regs = {str(int(dst[0]) + k) for k in range(wide)}
        for j in range(i + 1, min(i + 1 + within, len(code))):
            rop, rargs = sass_opcode(code[j][1])
            operands = rargs.split(",")
            stores = rop.startswith(("ST", "RED", "ATOM"))
            read = set(REG.findall(rargs if stores else ",".join(operands[1:])))
            if regs & read:
                out.append((off, ins, j - i, code[j][1]))
                break
            if not stores and regs & set(REG.findall(operands[0])):
                break
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--q", type=int, default=4, help="hidden size / 1024")
    ap.add_argument("--rows", type=int, default=2, help="rows a cluster (a build: 1, 2, 4, 8)")
    ap.add_argument("--threads", type=int, default=512)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--within", type=int, default=24, help="instructions after the load that count as at once")
    ap.add_argument("--defines", default="", help="tuning defines of the cycle, space-separated (CL_X=1 ...)")
    args = ap.parse_args()
    # the defines as the driver takes them: the build's host side (weight buffers) reads them too
    os.environ["DECODER_SHELL_CUDA_DEFINES"] = args.defines
    src, entry = source(args.q, args.rows, args.threads, args.ranks)
    code = sass_instructions(disassemble(compile_cubin(src, "sm_90", EXACT_FLAGS, name="cluster_cycle.cu")), entry)
    rows = early_uses(code, args.within)
    print(f"{entry}{' ' + args.defines if args.defines else ''}: {len(code)} instructions, {len(rows)} loads read "
          f"within {args.within}")
    print("| offset | load | read after | by |\n|---|---|---|---|")
    for off, ins, dist, reader in rows:
        print(f"| {off} | `{ins}` | {dist} | `{reader}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
