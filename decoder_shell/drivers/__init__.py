"""Drivers run a cycle program: cpu (numpy reference), cuda (cuda-python), level-zero (SPIR-V)."""

from __future__ import annotations

from ..errors import DriverUnavailable, UsageError
from .base import Driver, Session

NAMES = ("auto", "cpu", "cuda", "level-zero")


def get_driver(name: str = "auto", **options) -> Driver:
    """Return a driver by name; `auto` picks cuda when a CUDA GPU is usable, else cpu.

    A driver that cannot run here raises DriverUnavailable (exit 3) with a one-line reason.
    """
    if name not in NAMES:
        raise UsageError(f"unknown driver {name!r}; choose one of {', '.join(NAMES)}")
    if name == "auto":
        try:
            return get_driver("cuda", **options)
        except DriverUnavailable:
            return get_driver("cpu", **options)
    if name == "cpu":
        from .cpu import CpuDriver
        return CpuDriver(**options)
    if name == "cuda":
        try:
            from .cuda import CudaDriver
        except ImportError as e:
            raise DriverUnavailable(f"cuda driver unavailable: {e} (install the 'cuda' extra)") from None
        return CudaDriver(**options)
    try:
        from .level_zero import LevelZeroDriver
    except ImportError as e:
        raise DriverUnavailable(f"level-zero driver unavailable: {e} (install the 'intel' extra)") from None
    return LevelZeroDriver(**options)


__all__ = ["Driver", "Session", "get_driver", "NAMES"]
