"""Micro-benchmark of the post/comb chain on the device, per Sinkhorn form, checked bit-for-bit.

The persistent cycle's critical chain at the start of a step is warp 0's: the producer's partials,
block_mix, the sigmoid, the softmax and 39 dependent Sinkhorn half-iterations. This tool times each
piece inside one warp with clock64 (tools/sinkhorn_bench.cu, built on kernels.py's SOURCE + persistent.cu once
per SINKHORN_FORM: `lanes`, `regs`, `regs-shared`, `lanes-fast`), plus the atoms of a half-iteration (a division
alone, a division by a shared reciprocal, a shuffle round, pexp, the ring fold), the chain again in a
128-thread block whose four warps have just issued a unit's 128 weight loads each (as in the persistent
kernel: shuffles share the memory pipeline's queue with loads) and without them, and checks every output against the
numpy contracts: the comb of random logits over many binades (contracts.mhc.sinkhorn), post and comb
from random lane-group partials (contracts.mhc.mhc_split of the mixes block_mix makes), and the
quotients of __fdiv_rn and div_by over every fp32 binade with zeros, subnormals, infinities and NaN.
A form that mismatches is reported as such (exit 1) and must not be selected. ptxas' register and
spill counts of the bench, the persistent kernel and the Sinkhorn node are listed per form.

    python tools/sinkhorn_bench.py [--rows 2048] [--json out.json]
"""

from __future__ import annotations

import argparse
import ctypes as C
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoder_shell.contracts.mhc import DEFAULT, mhc_split, sinkhorn  # noqa: E402
from decoder_shell.contracts.numerics import F32  # noqa: E402
from decoder_shell.drivers.cuda.kernels import SINKHORN_FORMS, SOURCE  # noqa: E402
from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin, ptxas_report  # noqa: E402
from decoder_shell.drivers.cuda.persistent import PERSISTENT_SOURCE, source  # noqa: E402

BENCH_SOURCE = Path(__file__).with_name("sinkhorn_bench.cu").read_text()
D = 4096
HC_D = 4 * D  # the projection's input width N (every partial's lane sum runs over it)
#: clock64 pieces written by the kernel (index: name, repetitions inside the piece)
PIECES = {0: ("partial loads (16 __ldcg)", 1), 1: ("block_mix", 1), 2: ("sigmoid (post)", 1),
          3: ("softmax + first division", 1), 4: ("sinkhorn_lane whole (softmax + 39 half-iterations)", 1),
          5: ("post_comb_from whole", 1), 6: ("__fdiv_rn, dependent", 32), 7: ("recip + div_by, dependent", 32),
          8: ("div_by one reciprocal, dependent", 32), 9: ("4 shuffles + 4 adds, dependent", 32),
          10: ("pexp, dependent", 16), 11: ("ring fold of 4 elements x 4 ranks (Q=4)", 1),
          12: ("post_comb_from behind 4 warps x 128 weight loads", 1),
          13: ("post_comb_from, 4-warp block, no loads", 1)}


class BenchArgs(C.Structure):
    _fields_ = [(n, C.c_uint64) for n in ("logits", "comb", "partials", "base", "scale", "post", "comb2",
                                         "da", "db", "q_rn", "q_shared", "cycles", "w")] + \
               [(n, C.c_int) for n in ("rows", "iters", "D", "ndiv")] + [("eps", C.c_float), ("norm_eps", C.c_float)]


def bench_source(form: int) -> str:
    return SOURCE + PERSISTENT_SOURCE + BENCH_SOURCE


def flags(form: int) -> tuple[str, ...]:
    return (*EXACT_FLAGS, f"-DSINKHORN_FORM={form}")


def inputs(rows: int, seed: int = 26):
    """Logits over many binades (with ties, equal rows and values that saturate pexp), partials of
    realistic and extreme scale, and division operands over every fp32 bit pattern class."""
    rng = np.random.default_rng(seed)
    mag = np.exp2(rng.uniform(-24, 10, (rows, 1))).astype(F32)
    logits = (rng.standard_normal((rows, 16)).astype(F32) * mag).astype(F32)
    logits[::7] = logits[::7, :1]  # equal logits in a row
    logits[1::11, :8] = logits[1::11, 8:]  # repeated values
    part = (rng.standard_normal((rows, 8, 25)) * np.exp2(rng.uniform(-6, 6, (rows, 1, 1)))).astype(F32)
    part[:, :, 0] = np.abs(part[:, :, 0]) * np.float32(HC_D / 8)
    base = (rng.standard_normal(24) * 0.5).astype(F32)
    scale = (rng.uniform(0.5, 2.0, 3)).astype(F32)
    n = 1 << 20
    bits = rng.integers(0, 1 << 32, (2, n), dtype=np.uint64).astype(np.uint32)
    da, db = bits[0].view(F32).copy(), bits[1].view(F32).copy()
    k = n // 4  # quarters: near div_by's bounds, Sinkhorn's own range, near-tie quotients, random bits
    for arr in (da, db):
        e = rng.choice([66, 67, 68, 185, 186, 187], k).astype(np.uint32)
        arr[:k] = ((e << 23) | rng.integers(0, 1 << 23, k).astype(np.uint32)).view(F32)
        arr[k:2 * k] = rng.uniform(1e-6, 4.0, k).astype(F32)
    # near-tie quotients: denominators with an all-ones (or nearly) mantissa, numerators with an empty one
    e = rng.integers(60, 194, (2, k)).astype(np.uint32)
    db[2 * k:3 * k] = ((e[0] << 23) | ((1 << 23) - 1 - rng.integers(0, 8, k).astype(np.uint32))).view(F32)
    da[2 * k:3 * k] = ((e[1] << 23) | rng.integers(0, 8, k).astype(np.uint32)).view(F32)
    da[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39, 1.0]
    db[8:16] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39, 1.0]
    return logits, part, base, scale, da, db



def expected(logits, part, base, scale):
    comb = sinkhorn(logits.reshape(-1, 4, 4), DEFAULT).reshape(-1, 16)
    v, ss = part[:, :, 1:].copy(), part[:, :, 0].copy()
    step = 1
    while step < 8:  # block_mix: adjacent pairs over the 8 lane groups
        for b in range(0, 8, 2 * step):
            v[:, b] = v[:, b] + v[:, b + step]
            ss[:, b] = ss[:, b] + ss[:, b + step]
        step *= 2
    mix = v[:, 0] * (np.float32(1.0) / np.sqrt(ss[:, 0] / np.float32(HC_D) + np.float32(DEFAULT.norm_eps)))[:, None]
    _, post, comb2 = mhc_split(mix.astype(F32), base, scale, 4, DEFAULT)
    return comb, post, comb2.reshape(-1, 16)


def bits_differ(got, want) -> int:
    g, w = np.asarray(got, F32), np.asarray(want, F32)
    both_nan = np.isnan(g) & np.isnan(w)
    return int(((g.view(np.uint32) != w.view(np.uint32)) & ~both_nan).sum())


def registers() -> dict:
    """ptxas' registers and spills per form: the bench, the persistent kernel (D=4096) and the Sinkhorn node."""
    out = {}
    for name, form in SINKHORN_FORMS.items():
        r = ptxas_report(bench_source(form), "sm_90", flags(form), "sinkhorn_bench.cu")
        for opg in (4, 8):
            src, entry = source(opg, D // 1024)
            r.update({k: v for k, v in ptxas_report(src, "sm_90", flags(form), "persistent.cu").items() if k == entry})
        out[name] = {k: v for k, v in r.items()
                     if k in ("sinkhorn_bench", "sinkhorn_contended", "sinkhorn_kernel") or k.startswith("persistent_")}
    return out


def run(rows: int = 2048, regs: bool = True) -> dict:
    from decoder_shell.drivers import get_driver
    drv = get_driver("cuda", placement="emulated")
    cu = drv.cu
    cu.cuCtxSetCurrent(drv.ctx)
    attr = __import__("cuda.bindings.driver", fromlist=["x"]).CUdevice_attribute
    khz = int(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_CLOCK_RATE, drv.device))
    logits, part, base, scale, da, db = inputs(rows)
    want_comb, want_post, want_comb2 = expected(logits, part, base, scale)
    with np.errstate(all="ignore"):
        want_q = da / db
    blocks = (rows + 1) // 2
    host = {"logits": logits, "partials": part, "base": base, "scale": scale, "da": da, "db": db}
    outs = {"comb": (rows, 16), "post": (rows, 4), "comb2": (rows, 16), "q_rn": da.shape, "q_shared": da.shape}
    ptrs, res = {}, {"device": drv.gpu, "sm_clock_khz": khz, "rows": rows, "divisions": int(da.size), "forms": {}}
    try:
        for n, a in host.items():
            ptrs[n] = int(cu.cuMemAlloc(a.nbytes))
            cu.cuMemcpyHtoD(ptrs[n], np.ascontiguousarray(a).ctypes.data, a.nbytes)
        for n, shp in outs.items():
            ptrs[n] = int(cu.cuMemAlloc(int(np.prod(shp)) * 4))
        ptrs["cycles"] = int(cu.cuMemAlloc(blocks * 16 * 8))
        wbytes = blocks * 4 * 128 * 32 * 4  # 64 KB of weights a block (sinkhorn_contended)
        ptrs["w"] = int(cu.cuMemAlloc(wbytes))
        cu.cuMemsetD8(ptrs["w"], 0, wbytes)
        for name, form in SINKHORN_FORMS.items():
            mod = cu.cuModuleLoadData(compile_cubin(bench_source(form), drv.arch, flags(form), "sinkhorn_bench.cu"))
            try:
                func = cu.cuModuleGetFunction(mod, b"sinkhorn_bench")
                contended = cu.cuModuleGetFunction(mod, b"sinkhorn_contended")
                a = BenchArgs(**{k: int(ptrs[k]) for k in (*host, *outs, "cycles", "w")}, rows=rows,
                              iters=DEFAULT.sinkhorn_iters, D=D, ndiv=int(da.size), eps=DEFAULT.hc_eps,
                              norm_eps=DEFAULT.norm_eps)
                params = (C.c_void_p * 1)(C.addressof(a))
                for n in outs:
                    cu.cuMemsetD8(ptrs[n], 0xFF, int(np.prod(outs[n])) * 4)
                cyc = []
                for _ in range(3):  # the first launch is cold; the pieces are the median over the later ones
                    cu.cuLaunchKernel(func, blocks, 1, 1, 32, 1, 1, 0, 0, C.addressof(params), 0)
                    cu.cuCtxSynchronize()
                    c = np.zeros((blocks, 16), np.int64)
                    cu.cuMemcpyDtoH(c.ctypes.data, ptrs["cycles"], c.nbytes)
                    cu.cuLaunchKernel(contended, blocks, 1, 1, 128, 1, 1, 0, 0, C.addressof(params), 0)
                    cu.cuCtxSynchronize()
                    c2 = np.zeros((blocks, 16), np.int64)
                    cu.cuMemcpyDtoH(c2.ctypes.data, ptrs["cycles"], c2.nbytes)
                    c[:, 12:14] = c2[:, 12:14]
                    cyc.append(c)
                got = {}
                for n, shp in outs.items():
                    got[n] = np.zeros(shp, F32)
                    cu.cuMemcpyDtoH(got[n].ctypes.data, ptrs[n], got[n].nbytes)
            finally:
                cu.cuModuleUnload(mod)
            first = np.arange(0, rows, 2)  # post_comb_from's rows: the first of each warp
            mism = {"comb": bits_differ(got["comb"], want_comb),
                    "post": bits_differ(got["post"][first], want_post[first]),
                    "comb_from_partials": bits_differ(got["comb2"][first], want_comb2[first]),
                    "q __fdiv_rn": bits_differ(got["q_rn"], want_q), "q div_by": bits_differ(got["q_shared"], want_q)}
            warm = np.concatenate(cyc[1:])
            pieces = {}
            for i, (label, reps) in PIECES.items():
                cycles = float(statistics.median(warm[:, i])) / reps
                pieces[label] = {"cycles": round(cycles, 1), "ns": round(cycles / khz * 1e6, 1) if khz > 0 else None}
            res["forms"][name] = {"mismatches": mism, "exact": not any(mism.values()), "pieces": pieces}
    finally:
        for p in ptrs.values():
            cu.cuMemFree(p)
    if regs:
        res["ptxas"] = registers()
    return res


def render(res: dict) -> str:
    forms = list(res["forms"])
    out = [f"{res['device']}, SM clock {res['sm_clock_khz'] / 1e6:.2f} GHz (attribute), {res['rows']} rows, "
           f"{res['divisions']} quotients; cycles per piece (median over warps, per repetition for chains), ns in ()",
           "| piece | " + " | ".join(forms) + " |", "|---|" + "---|" * len(forms)]
    for label, _ in PIECES.values():
        out.append(f"| {label} | " + " | ".join(
            f"{res['forms'][f]['pieces'][label]['cycles']:.0f} ({res['forms'][f]['pieces'][label]['ns'] or 0:.0f})"
            for f in forms) + " |")
    for key in res["forms"][forms[0]]["mismatches"]:
        out.append(f"| mismatching elements: {key} | " + " | ".join(
            str(res["forms"][f]["mismatches"][key]) for f in forms) + " |")
    out.append("| exact | " + " | ".join("yes" if res["forms"][f]["exact"] else "NO (not to be used)" for f in forms) + " |")
    for f, entries in res.get("ptxas", {}).items():
        out.append(f"ptxas sm_90 ({f}): " + ", ".join(
            f"{k} {v.get('registers')} regs, {v.get('spill_stores', 0)}/{v.get('spill_loads', 0)} B spilled, "
            f"{v.get('stack', 0)} B stack" for k, v in sorted(entries.items())))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--no-registers", action="store_true", help="skip the ptxas register report")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from decoder_shell.errors import ShellError
    try:
        res = run(args.rows, regs=not args.no_registers)
    except ShellError as e:
        print(f"sinkhorn_bench: {e}", file=sys.stderr)
        return e.exit_code
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    print(render(res))
    return 0 if all(f["exact"] for f in res["forms"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
