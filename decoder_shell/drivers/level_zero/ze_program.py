"""A cycle's launch plan as one immutable Level Zero command list, on any context and device.

The module is built from the project's SPIR-V, every launch of the plan gets its own kernel with its
arguments set once, and they are appended to one regular command list (each launch waits for the
previous one and signals a kernel-timestamp event), which is then closed. An epoch is one
zeCommandQueueExecuteCommandLists of that list. Everything created is recorded as it is made and
destroyed in reverse by close(), also after a build that failed half way.

Arguments are bound from the plan's own Args through plan.locate, the rule the SYCL path binds by:
a pointer is its allocation's address plus a fixed offset (a rank's slice of a buffer, or a region
of the arena that holds the MoE commands' scratch and the decode tables), a scalar its C value. So
every kernel the plan holds (mHC, all-reduce, each MoE command, any kernel added to moe_plan.py)
comes along without code here.

It needs only a context, a device and each allocation's device address, so the same call sequence
runs on a GPU (ze_session.py, over dpctl's allocations) and under the loader's null driver with the
validation layer (tests/test_level_zero_null.py, over zeMemAllocDevice).
"""

from __future__ import annotations

import ctypes
from ctypes import byref, c_void_p

from ..base import device_hung, wait_until
from . import plan as planning
from . import spirv, ze


class ZeProgram:
    def __init__(self, loader: ze.Loader, context, device, cycle, plan: list, address, il: bytes):
        """`address(allocation)` is the device address of a buffer id's allocation (every rank's copy)
        or, for plan.ARENA, of an allocation of at least `plan.arena(plan).nbytes` (self.layout)."""
        self.ze, self.context, self.device = loader, context, device
        self.cycle, self.plan, self.address = cycle, plan, address
        self.layout = planning.arena(plan)
        self._objects: list[tuple[str, c_void_p]] = []
        try:
            props = ze.device_properties(loader, device)
            self.tick_ns = float(props.timerResolution)
            self.tick_mask = ((1 << props.kernelTimestampValidBits) - 1 if props.kernelTimestampValidBits
                              else ze.UINT64_MAX)
            self.module = self._module(il)
            self.events = self._events(len(plan))
            self.queue = self._create("zeCommandQueueCreate", "zeCommandQueueDestroy", context, device,
                                      byref(ze.CommandQueueDesc(stype=ze.STYPE_COMMAND_QUEUE_DESC,
                                                                mode=ze.COMMAND_QUEUE_MODE_ASYNCHRONOUS)))
            self.command_list = self._command_list()
        except BaseException:
            self.close()
            raise

    def _create(self, create: str, destroy: str, *args) -> c_void_p:
        h = c_void_p()
        getattr(self.ze, create)(*args, byref(h))
        self._objects.append((destroy, h))
        return h

    def _module(self, il: bytes) -> c_void_p:
        buf = ctypes.create_string_buffer(il, len(il))
        desc = ze.ModuleDesc(stype=ze.STYPE_MODULE_DESC, format=ze.MODULE_FORMAT_IL_SPIRV, inputSize=len(il),
                             pInputModule=ctypes.cast(buf, c_void_p), pBuildFlags=spirv.RUNTIME_OPTIONS.encode())
        module, log = c_void_p(), c_void_p()
        code = self.ze.lib.zeModuleCreate(self.context, self.device, byref(desc), byref(module), byref(log))
        text = _build_log(self.ze, log)
        if code != 0:
            first = next((ln for ln in text.splitlines() if ln.strip()), "no build log")
            raise ze.ZeError(f"Level Zero zeModuleCreate returned {ze.result_name(code)}: {first}")
        self._objects.append(("zeModuleDestroy", module))
        return module

    def _events(self, count: int) -> list[c_void_p]:
        pool_desc = ze.EventPoolDesc(stype=ze.STYPE_EVENT_POOL_DESC, count=max(count, 1),
                                     flags=ze.EVENT_POOL_FLAG_HOST_VISIBLE | ze.EVENT_POOL_FLAG_KERNEL_TIMESTAMP)
        pool = self._create("zeEventPoolCreate", "zeEventPoolDestroy", self.context, byref(pool_desc), 1,
                            byref(self.device))
        return [self._create("zeEventCreate", "zeEventDestroy", pool,
                             byref(ze.EventDesc(stype=ze.STYPE_EVENT_DESC, index=i, signal=ze.EVENT_SCOPE_FLAG_HOST,
                                                wait=ze.EVENT_SCOPE_FLAG_HOST)))
                for i in range(count)]

    def _kernel(self, launch: planning.Launch) -> c_void_p:
        k = self._create("zeKernelCreate", "zeKernelDestroy", self.module,
                         byref(ze.KernelDesc(stype=ze.STYPE_KERNEL_DESC, pKernelName=launch.kernel.encode())))
        self.ze.zeKernelSetGroupSize(k, launch.local_size, 1, 1)
        for i, a in enumerate(launch.args):
            where = planning.locate(self.cycle, self.layout, a)
            value = planning.scalar(a) if where is None else c_void_p(self.address(where[0]) + where[1])
            self.ze.zeKernelSetArgumentValue(k, i, ctypes.sizeof(value), byref(value))
        return k

    def _command_list(self) -> c_void_p:
        cl = self._create("zeCommandListCreate", "zeCommandListDestroy", self.context, self.device,
                          byref(ze.CommandListDesc(stype=ze.STYPE_COMMAND_LIST_DESC)))
        for ev in self.events:
            self.ze.zeCommandListAppendEventReset(cl, ev)
        self.ze.zeCommandListAppendBarrier(cl, None, 0, None)
        for i, launch in enumerate(self.plan):
            groups = ze.GroupCount(launch.global_size // launch.local_size, 1, 1)
            wait = (c_void_p * 1)(self.events[i - 1]) if i else None
            self.ze.zeCommandListAppendLaunchKernel(cl, self._kernel(launch), byref(groups), self.events[i],
                                                    1 if i else 0, wait)
        self.ze.zeCommandListClose(cl)
        return cl

    def run(self) -> list[float]:
        """One epoch: execute the command list, wait, and each rank's time from the kernel timestamps."""
        lists = (c_void_p * 1)(self.command_list)
        self.ze.zeCommandQueueExecuteCommandLists(self.queue, 1, lists, None)
        wait_until(lambda: self.ze.synchronize(self.queue), "the cycle's command list")
        durations = []
        for ev in self.events:
            ts = ze.KernelTimestampResult()
            self.ze.zeEventQueryKernelTimestamp(ev, byref(ts))
            ticks = (ts.context.kernelEnd - ts.context.kernelStart) & self.tick_mask
            durations.append(ticks * self.tick_ns * 1e-6)
        return planning.rank_times(self.cycle, self.plan, durations)

    def close(self) -> None:
        if device_hung():  # a queue still running its list: destroying it would wait for ever
            return
        while self._objects:
            destroy, h = self._objects.pop()
            getattr(self.ze, destroy)(h)


def _build_log(loader: ze.Loader, log: c_void_p) -> str:
    """The module build log's text (and the log freed); empty when there is none."""
    if not log.value:
        return ""
    size = ctypes.c_size_t(0)
    loader.zeModuleBuildLogGetString(log, byref(size), None)
    text = ctypes.create_string_buffer(size.value or 1)
    loader.zeModuleBuildLogGetString(log, byref(size), text)
    loader.zeModuleBuildLogDestroy(log)
    return text.value.decode(errors="replace")
