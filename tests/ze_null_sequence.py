"""The project's whole Level Zero call sequence, run by tests/test_level_zero_null.py in a process whose
environment enables the loader's null driver and the validation layer's checks. Any call that fails or
does not validate raises (ZeError); the last line printed is a JSON summary.

Cycles: a dense one (all-reduce and mHC), and the tiny-moe MoE cycles (TP2; packed and expanded
weights; dspark and mtp1 drafts; official and fused combine). For each MoE cycle, every kernel launch the command list received
is recorded from the Level Zero calls themselves (kernel name, group size and count, the bytes of
every argument, a pointer named by its allocation and offset), so the test can compare it with the
launches the SYCL path executes.

    python tests/ze_null_sequence.py LIBDIR [GROUP]
"""

from __future__ import annotations

import json
import sys
from ctypes import byref, c_void_p

from decoder_shell.commands.program import build_cycle
from decoder_shell.contracts.allreduce import RingContract
from decoder_shell.drivers.level_zero import plan as planning
from decoder_shell.drivers.level_zero import spirv, ze
from decoder_shell.drivers.level_zero.ze_program import ZeProgram
from decoder_shell.geometry import Geometry, preset

#: (weights, draft kind, combine mode) of the MoE cycles run here: every combination.
MOE_CASES = tuple((w, k, c) for c in ("official", "fused") for k in ("dspark", "mtp1") for w in ("packed", "expanded"))


def moe_cycle(weights: str, kind: str, combine: str):
    """The tiny-moe TP2 cycle of one case (the test builds the SYCL path's from the same function)."""
    return build_cycle(preset("tiny-moe", tp=2, verify_rows=2, draft_rows=5, draft_kind=kind, moe_weights=weights,
                              moe_combine=combine), RingContract())


#: tiny-moe-attn TP2 cycles (the draft's dense attention commands beside the MoE ones): weights, draft kind.
ATTN_CASES = (("packed", "dspark"), ("expanded", "mtp1"))


def attn_cycle(weights: str, kind: str):
    return build_cycle(preset("tiny-moe-attn", tp=2, verify_rows=2, draft_rows=5, draft_kind=kind,
                              moe_weights=weights), RingContract())


class RecordingLoader(ze.Loader):
    """The real loader; also keeps what each kernel was created, sized, bound and launched with."""

    def __init__(self, path: str):
        super().__init__(path)
        self.kernels: dict[int, dict] = {}
        self.launched: list[dict] = []

    def __getattr__(self, name):
        call = super().__getattr__(name)

        def recorded(*args):
            code = call(*args)
            if name == "zeKernelCreate":
                self.kernels[args[2]._obj.value] = {"kernel": args[1]._obj.pKernelName.decode(), "args": {}}
            elif name == "zeKernelSetGroupSize":
                self.kernels[args[0].value]["local"] = args[1]
            elif name == "zeKernelSetArgumentValue":
                self.kernels[args[0].value]["args"][args[1]] = bytes(args[3]._obj)[:args[2]]
            elif name == "zeCommandListAppendLaunchKernel":
                k = self.kernels[args[1].value]
                self.launched.append({**k, "groups": args[2]._obj.groupCountX})
            return code
        return recorded


def symbolic(launch: dict, allocations: dict) -> dict:
    """A recorded launch with every pointer as [allocation, offset] and every scalar as its bytes (hex)."""
    def arg(raw: bytes):
        if len(raw) == 8:
            v = int.from_bytes(raw, "little")
            for space, (base, size) in allocations.items():
                if base <= v < base + size:
                    return ["ptr", space, v - base]
        return ["val", raw.hex()]
    n = len(launch["args"])
    return {"kernel": launch["kernel"], "global": launch["groups"] * launch["local"], "local": launch["local"],
            "args": [arg(launch["args"][i]) for i in range(n)]}


def run_cycle(loader, context, device, cyc, group: int, il: bytes) -> dict:
    """Allocate the cycle's buffers and the plan's arena, build the command list, run 3 epochs, free all."""
    plan = planning.build_plan(cyc, group)
    layout = planning.arena(plan)
    alloc = ze.DeviceMemAllocDesc(stype=ze.STYPE_DEVICE_MEM_ALLOC_DESC)
    allocations = {}
    for space, size in [*((b.id, max(b.nbytes, 1) * cyc.ranks) for b in cyc.buffers),
                        (planning.ARENA, max(layout.nbytes, 1))]:
        p = c_void_p()
        loader.zeMemAllocDevice(context, byref(alloc), size, 64, device, byref(p))
        allocations[space] = (p.value, size)
    first = len(loader.launched)
    program = ZeProgram(loader, context, device, cyc, plan, lambda s: allocations[s][0], il)
    try:
        times = [program.run() for _ in range(3)]
    finally:
        program.close()
        for p, _ in allocations.values():
            loader.zeMemFree(context, c_void_p(p))
    launched = loader.launched[first:]
    return {"launches": len(plan), "appended": len(launched), "kernels": sorted({l.kernel for l in plan}),
            "epochs": len(times), "ranks_timed": len(times[0]), "arena_bytes": layout.nbytes,
            "bindings": [symbolic(l, allocations) for l in launched]}


def main(libdir: str, group: int) -> dict:
    loader = RecordingLoader(f"{libdir}/libze_loader.so.1")
    ze.require_driver(f"{libdir}/libze_loader.so.1")
    driver = ze.drivers(loader)[0]
    device = c_void_p(ze.devices(loader, driver)[0])
    desc = ze.ContextDesc(stype=ze.STYPE_CONTEXT_DESC)
    # the validation layer is on: a null output pointer is refused before any driver sees it
    refused = loader.lib.zeContextCreate(driver, byref(desc), None)
    context = c_void_p()
    loader.zeContextCreate(driver, byref(desc), byref(context))
    il = spirv.build(planning.LANES // group)
    dense = run_cycle(loader, context, device,
                      build_cycle(Geometry(preset="random", hidden=2048, layers=2, ranks=2, verify_rows=2,
                                           draft_rows=1), RingContract()), group, il)
    moe = {"-".join(case): run_cycle(loader, context, device, moe_cycle(*case), group, il) for case in MOE_CASES}
    attn = {"-".join(case): run_cycle(loader, context, device, attn_cycle(*case), group, il) for case in ATTN_CASES}
    p = c_void_p()
    loader.zeMemAllocDevice(context, byref(ze.DeviceMemAllocDesc(stype=ze.STYPE_DEVICE_MEM_ALLOC_DESC)), 4096, 64,
                            device, byref(p))
    handle = ze.ipc_export(loader, context, p.value)
    try:
        ze.ipc_open(loader, context, device, handle)
        opened = "address"
    except ze.ZeError as e:  # the null driver validates the call but maps nothing
        opened = str(e)
    loader.zeMemFree(context, p)
    loader.zeContextDestroy(context)
    dense.pop("bindings")
    return {"refused_null_pointer": ze.result_name(refused), "spirv_bytes": len(il), "group": group,
            **dense, "ipc_handle_bytes": len(handle), "ipc_open": opened, "moe": moe, "attn": attn}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else planning.group_size(256))))
