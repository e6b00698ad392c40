"""The level-zero driver: OpenCL C kernels compiled to SPIR-V, run through dpctl (SYCL) on a Level
Zero GPU, or on Intel's OpenCL CPU device where no GPU exists; Level Zero calls through ctypes for
what SYCL does not expose (immutable command lists, IPC handles)."""

from .driver import LevelZeroDriver

__all__ = ["LevelZeroDriver"]
