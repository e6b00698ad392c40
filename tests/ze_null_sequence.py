"""The project's whole Level Zero call sequence, run by tests/test_level_zero_null.py in a process whose
environment enables the loader's null driver and the validation layer's parameter checks. Any call
that fails or does not validate raises (ZeError); the last line printed is a JSON summary.

    python tests/ze_null_sequence.py LIBDIR
"""

from __future__ import annotations

import ctypes
import json
import sys
from ctypes import byref, c_void_p

from decoder_shell.commands.program import build_cycle
from decoder_shell.contracts.allreduce import RingContract
from decoder_shell.drivers.level_zero import plan as planning
from decoder_shell.drivers.level_zero import spirv, ze
from decoder_shell.drivers.level_zero.ze_program import ZeProgram
from decoder_shell.geometry import Geometry


def main(libdir: str) -> dict:
    loader = ze.require_driver(f"{libdir}/libze_loader.so.1")
    driver = ze.drivers(loader)[0]
    device = c_void_p(ze.devices(loader, driver)[0])
    desc = ze.ContextDesc(stype=ze.STYPE_CONTEXT_DESC)
    # the validation layer is on: a null output pointer is refused before any driver sees it
    refused = loader.lib.zeContextCreate(driver, byref(desc), None)
    context = c_void_p()
    loader.zeContextCreate(driver, byref(desc), byref(context))
    cyc = build_cycle(Geometry(preset="random", hidden=2048, layers=2, ranks=2, verify_rows=2, draft_rows=1),
                      RingContract())
    group = planning.group_size(256)
    plan = planning.build_plan(cyc, group)
    il = spirv.build(planning.LANES // group)
    mem = {}
    alloc = ze.DeviceMemAllocDesc(stype=ze.STYPE_DEVICE_MEM_ALLOC_DESC)
    for b in cyc.buffers:
        p = c_void_p()
        loader.zeMemAllocDevice(context, byref(alloc), max(b.nbytes, 1) * cyc.ranks, 64, device, byref(p))
        mem[b.id] = p.value
    program = ZeProgram(loader, context, device, cyc, plan, mem.__getitem__, il)
    times = [program.run() for _ in range(3)]
    handle = ze.ipc_export(loader, context, mem[0])
    try:
        ze.ipc_open(loader, context, device, handle)
        opened = "address"
    except ze.ZeError as e:  # the null driver validates the call but maps nothing
        opened = str(e)
    program.close()
    for p in mem.values():
        loader.zeMemFree(context, c_void_p(p))
    loader.zeContextDestroy(context)
    return {"refused_null_pointer": ze.result_name(refused), "launches": len(plan), "spirv_bytes": len(il),
            "kernels": sorted({l.kernel for l in plan}), "epochs": len(times), "ranks_timed": len(times[0]),
            "ipc_handle_bytes": len(handle), "ipc_open": opened, "buffers": len(mem)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
