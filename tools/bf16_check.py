"""Every fp32 bit pattern through the device's f2bf, checked against the integer form (kernels.cu), and through
f2bf2 (two values a conversion: the cluster cycle's stream values) in either half, against f2bf.

f2bf (the bf16 rounding of every kernel: stream values, y, the folds' bf16 outputs) takes the hardware's
conversion (cvt.rn.bf16.f32) and fixes its canonical NaN by a select; f2bf_int is the integer form the
contracts' ml_dtypes rounding was matched with (tests/test_bf16_forms.py checks its numpy transliteration
against ml_dtypes). This tool runs both on the device over all 2^32 inputs, counts the inputs whose bf16
bits differ and reports the first few; a control run against truncation must find differences (the
count is live). Exit 0 when none differ and the control does, 1 otherwise, 3 without a CUDA device.

    python tools/bf16_check.py [--json out.json]
"""

from __future__ import annotations

import argparse
import ctypes as C
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from device_checks import check_module, launch, results_or_exit  # noqa: E402

KERNEL = r"""
extern "C" __global__ void bf16_check(unsigned long long* count, unsigned* first, unsigned lo_hi, int mode) {
  // inputs (lo_hi << 31) .. + 2^31 - 1: a grid-stride loop of 32-bit patterns; a count a thread, added once
  // (count[1]: the slots of `first` taken, a thread's first mismatch only)
  const unsigned long long n = 1ull << 31, base = (unsigned long long)lo_hi << 31;
  unsigned long long c = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    const unsigned u = (unsigned)(base + i);
    const float f = __uint_as_float(u);
    // mode 0: f2bf against f2bf_int; 1 (the control: against truncation, which differs from rounding for about half the
    // inputs); mode 2 / 3: f2bf2 with u in its low / high half against two f2bf, the other half an odd multiple
    // of u (a bijection: every pattern in that half too)
    bool bad;
    if (mode >= 2) {
      const float o = __uint_as_float(u * 2654435761u);
      const unsigned w = mode == 2 ? f2bf2(f, o) : f2bf2(o, f);
      const unsigned want = mode == 2 ? f2bf(f) | ((unsigned)f2bf(o) << 16) : f2bf(o) | ((unsigned)f2bf(f) << 16);
      bad = w != want;
    } else {
      bad = f2bf(f) != (mode ? (bf16_t)(u >> 16) : f2bf_int(f));
    }
    if (bad) {
      if (c++ == 0) {
        const unsigned long long k = atomicAdd(count + 1, 1ull);
        if (k < 16) first[k] = u;
      }
    }
  }
  if (c) atomicAdd(count, c);
}
"""


def run() -> dict:
    found = {}
    with check_module(KERNEL, "bf16_check.cu") as (drv, cu, mod):
        func = cu.cuModuleGetFunction(mod, b"bf16_check")
        count, first = int(cu.cuMemAlloc(16)), int(cu.cuMemAlloc(16 * 4))
        try:
            for mode in (0, 1, 2, 3):
                cu.cuMemsetD8(count, 0, 16)
                t0 = time.perf_counter()
                for half in (0, 1):
                    launch(cu, func, 132 * 16, [C.c_uint64(count), C.c_uint64(first), C.c_uint32(half),
                                                C.c_int32(mode)])
                cu.cuCtxSynchronize()
                secs = time.perf_counter() - t0
                n, f = np.zeros(2, np.uint64), np.zeros(16, np.uint32)
                cu.cuMemcpyDtoH(n.ctypes.data, count, 16)
                cu.cuMemcpyDtoH(f.ctypes.data, first, 64)
                found[mode] = (int(n[0]), f, secs)
        finally:
            cu.cuMemFree(count)
            cu.cuMemFree(first)
    (bad, f, secs), control_bad = found[0], found[1][0]
    pairs = {half: {"mismatching": found[k][0], "first": sorted(f"0x{int(u):08x}" for u in found[k][1][:min(found[k][0], 16)])}
             for k, half in ((2, "low"), (3, "high"))}
    return {"device": drv.gpu, "inputs": 1 << 32, "mismatching": bad, "seconds": round(secs, 3),
            "first": sorted(f"0x{int(u):08x}" for u in f[:min(bad, 16)]), "control_mismatching": control_bad,
            "pairs": pairs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    res = results_or_exit("bf16_check", run, args.json)
    print("| check | value |\n|---|---|")
    print(f"| f2bf against f2bf_int, every fp32 input | {res['inputs']:,} inputs, {res['mismatching']:,} mismatching "
          f"({res['seconds']} s on {res['device']}){'; first: ' + ', '.join(res['first']) if res['first'] else ''} |")
    for half, p in res["pairs"].items():
        print(f"| f2bf2 against two f2bf, every fp32 input in the {half} half | {p['mismatching']:,} mismatching"
              f"{'; first: ' + ', '.join(p['first']) if p['first'] else ''} |")
    print(f"| control: f2bf against truncation (must be > 0) | {res['control_mismatching']:,} mismatching |")
    paired = sum(p["mismatching"] for p in res["pairs"].values())
    sys.exit(1 if res["mismatching"] or paired or not res["control_mismatching"] else 0)


if __name__ == "__main__":
    main()
