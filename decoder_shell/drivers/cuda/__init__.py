"""The cuda driver: cuda-python driver API only (no torch in the replay path), NVRTC kernels,
fixed-address buffers, graphs built node by node, its own all-reduce (DESIGN.md 6)."""

from __future__ import annotations

from ..base import Driver
from . import api
from .session import VARIANTS, CudaSession


class CudaDriver(Driver):
    name = "cuda"

    def __init__(self, device: int = 0):
        raw = api.load()
        self.cu = api.Checked(raw)
        n = self.cu.cuDeviceGetCount()
        if not 0 <= device < n:
            from ...errors import DriverUnavailable
            raise DriverUnavailable(f"cuda driver unavailable: no device {device} ({n} present)")
        self.device = self.cu.cuDeviceGet(device)
        attr = raw.CUdevice_attribute
        major = self.cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device)
        minor = self.cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device)
        self.arch = f"sm_{major}{minor}"
        name = self.cu.cuDeviceGetName(128, self.device)
        self.gpu = (name.decode() if isinstance(name, bytes) else str(name)).split("\x00")[0].strip()
        self.ctx = self.cu.cuDevicePrimaryCtxRetain(self.device)
        self.cu.cuCtxSetCurrent(self.ctx)

    def load(self, cycle, variants=None) -> CudaSession:
        self.cu.cuCtxSetCurrent(self.ctx)
        return CudaSession(self, cycle, variants)

    def available_variants(self) -> dict:
        return dict(VARIANTS)

    def describe(self) -> str:
        return f"cuda ({self.gpu}, {self.arch}, emulated ranks on one device)"


__all__ = ["CudaDriver"]
