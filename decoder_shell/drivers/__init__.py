"""Drivers run a cycle program: cpu (numpy reference), cuda (cuda-python), level-zero (SPIR-V)."""

from __future__ import annotations

from ..errors import DriverUnavailable, UsageError
from .base import Driver, Session

NAMES = ("auto", "cpu", "cuda", "level-zero")
#: Options only the cuda driver takes: where ranks run (PLACEMENTS), PDL edges, and the cycle's form
#: (a graph, or one persistent kernel).
CUDA_OPTIONS = ("placement", "pdl", "cycle")
#: Where the cuda driver runs ranks: one process per rank when there is a GPU per rank (auto), all on one
#: device (emulated), or one process per rank regardless (processes).
PLACEMENTS = ("auto", "emulated", "processes")


def get_driver(name: str = "auto", **options) -> Driver:
    """Return a driver by name; `auto` picks cuda when a CUDA GPU is usable, else cpu.

    A driver that cannot run here raises DriverUnavailable (exit 3) with a one-line reason.
    """
    if name not in NAMES:
        raise UsageError(f"unknown driver {name!r}; choose one of {', '.join(NAMES)}")
    cuda_only = {k: options.pop(k) for k in CUDA_OPTIONS if k in options}  # other drivers ignore them
    if name in ("cpu", "level-zero") and cuda_only.get("placement", "auto") != "auto":
        raise UsageError(f"--placement is a cuda driver option (the {name} driver runs every rank in one process)")
    if name in ("cpu", "level-zero") and cuda_only.get("cycle", "graph") not in ("graph", "auto"):
        raise UsageError(f"--cycle persistent is a cuda driver option (the {name} driver has no persistent kernel)")
    if name == "auto":
        try:
            return get_driver("cuda", **options, **cuda_only)
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
        return CudaDriver(**options, **cuda_only)
    try:
        from .level_zero import LevelZeroDriver
    except ImportError as e:
        raise DriverUnavailable(f"level-zero driver unavailable: {e} (install the 'intel' extra)") from None
    return LevelZeroDriver(**options)


def probe() -> dict[str, str]:
    """Each driver's state here (for `shell --version`): "available: <description>" or
    "unavailable: <one-line reason>"."""
    from ..errors import ShellError
    out = {}
    for name in NAMES[1:]:
        try:
            out[name] = "available: " + get_driver(name).describe()
        except ShellError as e:
            out[name] = "unavailable: " + str(e).removeprefix(f"{name} driver unavailable: ")
    return out


__all__ = ["Driver", "Session", "get_driver", "probe", "NAMES"]
