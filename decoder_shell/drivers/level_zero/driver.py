"""LevelZeroDriver: picks the device once, then loads cycles onto it.

On a Level Zero GPU the session replays graph epochs as one immutable command list (ze_session);
on the OpenCL CPU device it submits the prebuilt launch plan through SYCL (sycl_session).
"""

from __future__ import annotations

from ...geometry import DENSE_OPS, MOE_OPS
from ..base import Driver, require_support
from . import runtime


class LevelZeroDriver(Driver):
    name = "level-zero"

    def __init__(self, device: str | None = None):
        self.kind, self.device = runtime.select_device(device or runtime.device_choice())
        self._target = None

    @property
    def target(self):
        """The device's queue and program, built at first use and shared by every session."""
        if self._target is None:
            from .sycl_session import Target
            self._target = Target(self.device)
        return self._target

    def load(self, cycle, variants=None):
        require_support(cycle, "level-zero", fused_norm=False,
                        ops=("allreduce", "mhc_pre", "mhc_post_pre", "mhc_post_head", *MOE_OPS, *DENSE_OPS))
        if self.kind == "gpu":
            from .ze_session import ZeSession
            return ZeSession(cycle, self.target, variants)
        from .sycl_session import SyclSession
        return SyclSession(cycle, self.target, variants)

    def available_variants(self) -> dict[str, str]:
        """Candidate implementations this driver offers, name -> one-line description."""
        from .plan import VARIANTS
        return {k: v for k, v in VARIANTS.items() if k != "baseline"}

    def versions(self) -> dict:
        from importlib import metadata
        d = self.device
        out = {"device": d.name, "device_driver": d.driver_version}
        try:
            out["dpctl"] = metadata.version("dpctl")
        except metadata.PackageNotFoundError:
            pass
        return out

    def describe(self):
        d = self.device
        where = "Level Zero GPU" if self.kind == "gpu" else "OpenCL CPU, not a GPU"
        return f"level-zero ({d.name}, {where}, driver {d.driver_version})"
