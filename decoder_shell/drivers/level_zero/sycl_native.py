"""Native backend handles of dpctl's SYCL objects (a ze_context_handle_t on Level Zero, a cl_context
on OpenCL), so Level Zero calls work on the very context that owns dpctl's USM allocations.

dpctl hands out the `sycl::context*` / `sycl::device*` behind its objects (`addressof_ref()`); the
DPC++ runtime exports
`sycl::context::getNative() const` and `sycl::device::getNative() const`, which return the backend
handle as an integer. These are called through ctypes on the already loaded libsycl.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from ...errors import DriverUnavailable

SYMBOLS = {"SyclContext": "_ZNK4sycl3_V17context9getNativeEv",
           "SyclDevice": "_ZNK4sycl3_V16device9getNativeEv"}


def loaded_libsycl() -> Path:
    """The libsycl.so this process has loaded (dpctl loads it on import)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if Path(path).name.startswith("libsycl.so"):
            return Path(path)
    raise DriverUnavailable("the SYCL runtime (libsycl.so) is not loaded; import dpctl first")


def native_handle(obj) -> int:
    """The backend handle of a dpctl SyclContext or SyclDevice."""
    fn = getattr(ctypes.CDLL(str(loaded_libsycl())), SYMBOLS[type(obj).__name__])
    fn.restype, fn.argtypes = ctypes.c_uint64, [ctypes.c_void_p]
    return int(fn(obj.addressof_ref()))
