"""What each of the cluster cycle's synchronizations costs on the device, alone (tools/sync_bench.cu).

The cluster cycle (drivers/cuda/cluster_cycle.cu) spends a step on work (stream values, dot products,
mixes, Sinkhorn, the fold) and on meeting: block barriers, the partials' exchange between a rank's 16
blocks, the rank's barrier and the all-reduce's flag-and-data join between ranks. The same grid doing only
its meetings (`cluster_check.py`'s "sync only") takes about 4 us a step on an H200. This tool times each
meeting alone, as a chain of rounds on the cycle's own grid (one 16-block cluster a rank, 512 threads a
block) with the cycle's own functions, so the distance from a step's synchronization to its primitives is
a table. Per mode: us a round (median over launches of the slowest block's span / rounds). Tuning defines
of the cycle (CL_WBUF2=0 ...) reach the bench as they reach the cycle: DECODER_SHELL_CUDA_DEFINES.

    python tools/sync_bench.py [--ranks 4] [--rows 2] [--rounds 2000] [--launches 7] [--json out.json]
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

from decoder_shell.drivers.cuda.cluster_cycle import CL_SIZE, source  # noqa: E402
from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin  # noqa: E402

BENCH_SOURCE = Path(__file__).with_name("sync_bench.cu").read_text()
MODES = {0: "block barrier (512 threads)", 1: "rank barrier (cluster arrive.relaxed + wait.acquire)",
         2: "partials' exchange (st.async into 16 blocks, mbarrier wait) + 2 block barriers",
         3: "flag-and-data join between ranks (publish, fold_ll's polls) + block barrier",
         4: "rank barrier + flag-and-data join (the cycle's join)",
         5: "exchange + rank barrier + join (a step's meetings)",
         6: "one word a rank, one thread a rank (the least a cross-rank join costs)",
         8: "exchange as flag-and-data words (st.relaxed.cluster, polled, no mbarrier) + block barrier",
         9: "exchange as one bulk copy a receiver (cp.async.bulk shared::cluster, mbarrier) + 2 block barriers",
         10: "exchange in two hops (piece j to block j, summed there, pushed to all 16) + 2 block barriers"}
Q, THREADS = 4, 512


class SArgs(C.Structure):
    _fields_ = [("mode", C.c_int), ("rounds", C.c_int), ("npieces", C.c_int), ("rows", C.c_int),
                ("stamps", C.c_uint64), ("ll", C.c_uint64), ("stride", C.c_longlong), ("err", C.c_uint64),
                ("timeout_ns", C.c_uint64), ("cycles", C.c_uint64)]


def bench_source(ranks: int) -> tuple[str, str]:
    src, _ = source(Q, 2, THREADS, ranks)
    entry = f"sync_bench_n{ranks}"
    return (src + BENCH_SOURCE + f'extern "C" __global__ void __launch_bounds__({THREADS}, 1) {entry}(const SArgs a) '
            f'{{ sync_bench<{Q}, {THREADS}, {ranks}>(a); }}\n'), entry


def run(ranks: int, rows: int, rounds: int, launches: int) -> dict:
    from decoder_shell.drivers import get_driver
    drv = get_driver("cuda", placement="emulated")
    cu = drv.cu
    cu.cuCtxSetCurrent(drv.ctx)
    b = cu.bindings
    src, entry = bench_source(ranks)
    mod = cu.cuModuleLoadData(compile_cubin(src, drv.arch, EXACT_FLAGS, "sync_bench.cu"))
    func = cu.cuModuleGetFunction(mod, entry.encode())
    cu.cuFuncSetAttribute(func, b.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
    blocks = ranks * CL_SIZE
    cfg = b.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = blocks, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = THREADS, 1, 1
    cfg.sharedMemBytes, cfg.hStream = 0, 0
    at = b.CUlaunchAttribute()
    at.id = b.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    at.value.clusterDim.x, at.value.clusterDim.y, at.value.clusterDim.z = CL_SIZE, 1, 1
    cfg.attrs, cfg.numAttrs = [at], 1
    stride = rows * Q * 1024
    ll_bytes = 2 * ranks * stride * 4
    ptr = {k: int(cu.cuMemAlloc(n)) for k, n in (("stamps", blocks * 16), ("ll", ll_bytes), ("err", 64), ("cycles", 16))}
    res = {"device": drv.gpu, "ranks": ranks, "rows": rows, "rounds": rounds, "launches": launches, "modes": {}}
    try:
        khz = int(cu.cuDeviceGetAttribute(b.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_CLOCK_RATE, drv.device))
        res["sm_clock_khz"] = khz
        for mode in (*MODES, 7):
            per = []
            for _ in range(launches + 1):  # the first launch is a warm-up
                cu.cuMemsetD8(ptr["ll"], 0, ll_bytes)
                cu.cuMemsetD8(ptr["err"], 0, 64)
                a = SArgs(mode=mode, rounds=rounds, npieces=(rows * 25 + 3) // 4, rows=rows, stamps=ptr["stamps"],
                          ll=ptr["ll"], stride=stride, err=ptr["err"], timeout_ns=2_000_000_000, cycles=ptr["cycles"])
                params = (C.c_void_p * 1)(C.addressof(a))
                cu.cuLaunchKernelEx(cfg, func, C.addressof(params), 0)
                cu.cuCtxSynchronize()
                err = np.zeros(1, np.int32)
                cu.cuMemcpyDtoH(err.ctypes.data, ptr["err"], 4)
                if err[0]:
                    raise SystemExit(f"sync_bench: mode {mode} stopped by the watchdog at round {err[0] - 1}")
                st = np.zeros((blocks, 2), np.uint64)
                cu.cuMemcpyDtoH(st.ctypes.data, ptr["stamps"], st.nbytes)
                if mode == 7:
                    cyc = np.zeros(2, np.int64)
                    cu.cuMemcpyDtoH(cyc.ctypes.data, ptr["cycles"], 16)
                    per.append(cyc[0] / rounds)
                else:
                    span = st[:, 1].astype(np.int64).max() - st[:, 0].astype(np.int64).min()
                    per.append(span / rounds / 1e3)
            warm = per[1:]
            if mode == 7:
                res["timer_read_cycles"] = float(statistics.median(warm))
            else:
                res["modes"][MODES[mode]] = {"us_per_round": float(statistics.median(warm)),
                                             "min": float(min(warm)), "max": float(max(warm))}
    finally:
        for p in ptr.values():
            cu.cuMemFree(p)
        cu.cuModuleUnload(mod)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--rows", type=int, default=2, help="rows of the join (1 or 2)")
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--launches", type=int, default=7)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.rows not in (1, 2):
        raise SystemExit("sync_bench: --rows must be 1 or 2 (the bench's fold holds two rows' elements a thread)")
    if not 1 <= args.rounds < 60000:
        raise SystemExit("sync_bench: --rounds must be 1 .. 59999 (the join words carry 16 bits of the round)")
    res = run(args.ranks, args.rows, args.rounds, args.launches)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    print(f"# {res['device']}: {args.ranks} ranks x {CL_SIZE} blocks x {THREADS} threads, {args.rows} rows, "
          f"{args.rounds} rounds, median of {args.launches} launches; a %globaltimer read "
          f"{res['timer_read_cycles']:.0f} cycles")
    print("| meeting | us a round (min / max) |\n|---|---|")
    for name, v in res["modes"].items():
        print(f"| {name} | {v['us_per_round']:.3f} ({v['min']:.3f} / {v['max']:.3f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
