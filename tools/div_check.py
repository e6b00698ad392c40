"""Every pair of fp32 mantissas through the Sinkhorn's short quotient, checked against __fdiv_rn (sinkhorn.cu).

div_short (SINKHORN_DIV_SHORT) reaches a / b one dependent FMA sooner than rcp_newton + div_fast: the first
estimate a * y0 is refined beside the reciprocal instead of after it. The lanes-fast Sinkhorn divides only
where div_range admits both operands (positive, normal, 2^-60 <= v < 2^60); there every step of both
forms is exact or a round-to-nearest of a normal value, so scaling a or b by a power of two scales every
intermediate and the quotient alike, provided the reciprocal's MUFU estimate scales too. So two checks
cover the whole admitted domain:
  1. the MUFU scaling: rcp.approx.ftz(m * 2^k) == rcp.approx.ftz(m) * 2^-k for every mantissa m and every
     exponent of the range (120 x 2^23 inputs);
  2. the quotient: div_short(a, b) == __fdiv_rn(a, b) for every a, b in [1, 2) (2^46 pairs, in launches of
     2^15 denominators).
A control (the estimate a * y1 without its correction, against __fdiv_rn) must find differences, so the
counts are live. Exit 0 when nothing differs and the control does, 1 otherwise, 3 without a CUDA device.

    python tools/div_check.py [--form short|shorter] [--json out.json] [--denominators N]   (N < 2^23: a prefix)
"""

from __future__ import annotations

import argparse
import ctypes as C
import sys
import time
from pathlib import Path

import numpy as np
from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parent))

from device_checks import check_module, launch, results_or_exit  # noqa: E402

KERNEL = r"""
// A near miss (not in sinkhorn.cu): the correction applied to the first estimate itself, q1 + (a - b*q1)*y1,
// MUFU + FMUL + 2 FMAs on the chain. Right on a million random pairs with any of three reciprocals (the CPU's
// test), wrong on 20,581 of the 2^46 mantissa pairs here (H200, 2026-12-04): what only the whole check finds.
__device__ __forceinline__ float div_shorter(float a, float b, float y0) {
  const float q1 = __fmul_rn(a, y0), e = __fmaf_rn(-b, y0, 1.0f);
  const float r1 = __fmaf_rn(-b, q1, a), y1 = __fmaf_rn(y0, e, y0);
  return __fmaf_rn(y1, r1, q1);
}
// count[0]: mismatching pairs, count[1]: slots of `first` taken ([k][2]: a, b bits); mode 0: div_short,
// 2: div_shorter, 1: the control (a * y1, uncorrected). Block x: denominator b0 + blockIdx.x; threads: every numerator.
extern "C" __global__ void div_check(unsigned long long* count, unsigned* first, unsigned b0, int mode) {
  const float b = __uint_as_float(0x3f800000u | (b0 + blockIdx.x));
  const float y0 = rcp_approx(b), y1 = rcp_newton(b);
  unsigned long long c = 0;
  for (unsigned m = threadIdx.x; m < (1u << 23); m += blockDim.x) {
    const float a = __uint_as_float(0x3f800000u | m);
    const float got = mode == 0 ? div_short(a, b, y0) : mode == 2 ? div_shorter(a, b, y0) : __fmul_rn(a, y1);
    if (__float_as_uint(got) != __float_as_uint(DIV(a, b)) && c++ == 0) {
      const unsigned long long k = atomicAdd(count + 1, 1ull);
      if (k < 8) { first[2 * k] = __float_as_uint(a); first[2 * k + 1] = __float_as_uint(b); }
    }
  }
  if (c) atomicAdd(count, c);
}
// count[2]: mantissas m and exponent fields E in [67, 187) where rcp.approx(m * 2^(E-127)) is not
// rcp.approx(m) with its exponent moved by -(E - 127).
extern "C" __global__ void rcp_scaling(unsigned long long* count) {
  unsigned long long c = 0;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < 120u << 23; i += gridDim.x * blockDim.x) {
    const unsigned m = i & ((1u << 23) - 1), ef = 67u + (i >> 23);
    const unsigned y = __float_as_uint(rcp_approx(__uint_as_float(0x3f800000u | m)));
    const unsigned ys = __float_as_uint(rcp_approx(__uint_as_float(ef << 23 | m)));
    c += ys != y - ((ef - 127u) << 23);
  }
  if (c) atomicAdd(count + 2, c);
}
"""

CHUNK = 1 << 15  # denominators a launch


FORMS = {"short": 0, "shorter": 2}  # the quotient checked: sinkhorn.cu div_short, or the near miss above


def run(denominators: int = 1 << 23, form: str = "short") -> dict:
    with check_module(KERNEL, "div_check.cu") as (drv, cu, mod):
        check, scaling = cu.cuModuleGetFunction(mod, b"div_check"), cu.cuModuleGetFunction(mod, b"rcp_scaling")
        count, first = int(cu.cuMemAlloc(24)), int(cu.cuMemAlloc(16 * 4))

        def counts():
            cu.cuCtxSynchronize()
            n, f = np.zeros(3, np.uint64), np.zeros(16, np.uint32)
            cu.cuMemcpyDtoH(n.ctypes.data, count, 24)
            cu.cuMemcpyDtoH(f.ctypes.data, first, 64)
            return n, f

        def quotients(b0, n, mode):
            launch(cu, check, n, [C.c_uint64(count), C.c_uint64(first), C.c_uint32(b0), C.c_int32(mode)])

        try:
            cu.cuMemsetD8(count, 0, 24)
            t0 = time.perf_counter()
            launch(cu, scaling, 132 * 16, [C.c_uint64(count)])
            scaling_bad = int(counts()[0][2])
            with Progress(transient=True) as bar:
                task = bar.add_task(f"div_{form} against __fdiv_rn", total=denominators)
                for b0 in range(0, denominators, CHUNK):
                    n = min(CHUNK, denominators - b0)
                    quotients(b0, n, FORMS[form])
                    if b0 // CHUNK % 16 == 15:
                        cu.cuCtxSynchronize()
                    bar.update(task, completed=b0 + n)
                n, f = counts()
            secs = time.perf_counter() - t0
            bad, slots = int(n[0]), f.copy()
            cu.cuMemsetD8(count, 0, 24)
            quotients(0, CHUNK, 1)
            control_bad = int(counts()[0][0])
        finally:
            cu.cuMemFree(count)
            cu.cuMemFree(first)
    pairs = [f"{np.uint32(slots[2 * k]).view(np.float32)!r} / {np.uint32(slots[2 * k + 1]).view(np.float32)!r}"
             for k in range(min(bad, 8))]
    return {"device": drv.gpu, "form": form, "pairs": denominators << 23, "mismatching": bad, "first": pairs,
            "rcp_scaling_inputs": 120 << 23, "rcp_scaling_mismatching": scaling_bad, "seconds": round(secs, 1),
            "control_pairs": CHUNK << 23, "control_mismatching": control_bad}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    ap.add_argument("--denominators", type=int, default=1 << 23, help="the first N of the 2^23 mantissas")
    ap.add_argument("--form", choices=sorted(FORMS), default="short",
                    help="the quotient: div_short (sinkhorn.cu) or the near miss div_shorter (exit 1)")
    args = ap.parse_args()
    if not 0 < args.denominators <= 1 << 23:
        print(f"div_check: --denominators {args.denominators}: must be in 1 .. {1 << 23}", file=sys.stderr)
        sys.exit(2)
    res = results_or_exit("div_check", lambda: run(args.denominators, args.form), args.json)
    print("| check | value |\n|---|---|")
    print(f"| rcp.approx scaling, every mantissa x exponents 2^-60 .. 2^59 | {res['rcp_scaling_inputs']:,} inputs, "
          f"{res['rcp_scaling_mismatching']:,} mismatching |")
    print(f"| div_{res['form']} against __fdiv_rn, mantissa pairs | {res['pairs']:,} pairs, {res['mismatching']:,} mismatching "
          f"({res['seconds']} s on {res['device']}){'; first: ' + ', '.join(res['first']) if res['first'] else ''} |")
    print(f"| control: a * y1 uncorrected (must be > 0) | {res['control_pairs']:,} pairs, "
          f"{res['control_mismatching']:,} mismatching |")
    sys.exit(1 if res["mismatching"] or res["rcp_scaling_mismatching"] or not res["control_mismatching"] else 0)


if __name__ == "__main__":
    main()
