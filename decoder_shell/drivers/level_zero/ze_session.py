"""The Level Zero GPU session: dpctl's USM buffers and SYCL eager path, plus one immutable command list.

At load, the plan becomes a ZeProgram (ze_program.py) on the native context that owns dpctl's
allocations: the cycle's buffers and the arena (MoE scratch, decode tables), all made once by
SyclSession, so the command list and the SYCL path bind the very same addresses. A graph epoch is one execution of its command list; eager epochs go through SYCL.
Runs only where a Level Zero GPU exists (the same call sequence runs in CI under the loader's null
driver: tests/test_level_zero_null.py).
"""

from __future__ import annotations

from ctypes import c_void_p

from ...commands.program import Cycle
from . import sycl_native, ze
from .sycl_session import SyclSession, Target
from .ze_program import ZeProgram


class ZeSession(SyclSession):
    def __init__(self, cycle: Cycle, target: Target, variants: dict | None = None):
        super().__init__(cycle, target, variants)
        self.program_ze = None
        try:
            self.ze = ze.require_driver()
            context = c_void_p(sycl_native.native_handle(self.queue.sycl_context))
            device = c_void_p(sycl_native.native_handle(target.device))
            self.program_ze = ZeProgram(self.ze, context, device, cycle, self.plan,
                                        lambda space: self.allocation(space)._pointer, target.spirv)
        except BaseException:
            super().close()
            raise

    def run(self, graph=True):
        if not graph:
            return super().run(graph=False)
        self.finish("the SYCL queue's work")
        return self.program_ze.run()

    def close(self):
        if self.program_ze is not None:
            self.program_ze.close()
            self.program_ze = None
        super().close()


__all__ = ["ZeSession"]
