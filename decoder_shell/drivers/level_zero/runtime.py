"""Find a SYCL device through dpctl: a Level Zero GPU when one exists, else Intel's OpenCL CPU device.

The `intel-opencl-rt` wheel installs its CPU runtime (libintelocl.so) into the environment's lib/,
but its ICD file names a build-time placeholder path, so the OpenCL ICD loader never finds it. We
point the loader at the real library through OCL_ICD_FILENAMES (additive: other vendors stay
visible) before dpctl first loads the SYCL runtime. Nothing outside the process is changed.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

from ...errors import DriverUnavailable, UsageError

#: SHELL_LEVEL_ZERO_DEVICE: "auto" (GPU if present, else CPU), "gpu" (Level Zero only) or "cpu".
DEVICE_ENV = "SHELL_LEVEL_ZERO_DEVICE"
DEVICE_CHOICES = ("auto", "gpu", "cpu")


def opencl_cpu_library() -> Path | None:
    """libintelocl.so as installed by the intel-opencl-rt wheel, or None."""
    try:
        files = importlib.metadata.files("intel-opencl-rt") or []
        dist = importlib.metadata.distribution("intel-opencl-rt")
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == "libintelocl.so":
            path = Path(dist.locate_file(f)).resolve()
            if path.is_file():
                return path
    return None


def register_opencl_cpu() -> Path | None:
    """Make the wheel's OpenCL CPU runtime visible to the ICD loader (call before importing dpctl)."""
    lib = opencl_cpu_library()
    if lib is None:
        return None
    current = [p for p in os.environ.get("OCL_ICD_FILENAMES", "").split(":") if p]
    if str(lib) not in current:
        os.environ["OCL_ICD_FILENAMES"] = ":".join([str(lib), *current])
    return lib


def import_dpctl():
    register_opencl_cpu()
    try:
        import dpctl  # noqa: F401
        import dpctl.memory  # noqa: F401
        import dpctl.program  # noqa: F401
    except ImportError as e:
        raise DriverUnavailable(f"level-zero driver unavailable: {e} (install the 'intel' extra)") from None
    return dpctl


def device_choice() -> str:
    choice = os.environ.get(DEVICE_ENV, "auto").strip().lower() or "auto"
    if choice not in DEVICE_CHOICES:
        raise UsageError(f"{DEVICE_ENV}={choice!r} is not one of {', '.join(DEVICE_CHOICES)}")
    return choice


def select_device(choice: str = "auto"):
    """The SYCL device to run on: ("gpu", device) for a Level Zero GPU, ("cpu", device) otherwise."""
    dpctl = import_dpctl()
    if choice in ("auto", "gpu"):
        gpus = dpctl.get_devices(backend="level_zero", device_type="gpu")
        if gpus:
            return "gpu", gpus[0]
        if choice == "gpu":
            from . import ze
            ze.require_driver()  # says why Level Zero has no GPU (no loader, no driver, no device)
            raise DriverUnavailable("level-zero driver: Level Zero has a driver but SYCL lists no GPU on it")
    cpus = [d for d in dpctl.get_devices(backend="opencl", device_type="cpu") if d.has_aspect_usm_device_allocations]
    if cpus:
        return "cpu", cpus[0]
    raise DriverUnavailable("level-zero driver: no Level Zero GPU and no OpenCL CPU device "
                            "(install the 'intel' extra for Intel's OpenCL CPU runtime)")
