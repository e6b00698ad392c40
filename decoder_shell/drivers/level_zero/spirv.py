"""OpenCL C -> SPIR-V with clang and llvm-spirv, built at first use and cached by content hash.

The kernels' numeric constants are generated from contracts/numerics.py (one source of truth), and
the cache key covers the sources, those definitions, the options and both tools' versions, so a
change to any of them builds a new module instead of reusing a stale one.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ...atomic import write_atomic
from ...contracts import numerics
from ...errors import BuildError, DriverUnavailable
from ..cache import cache_dir as kernel_cache

KERNEL_DIR = Path(__file__).with_name("kernels")
#: Concatenated in this order into one translation unit.
SOURCES = ("common.cl", "allreduce.cl", "mhc.cl", "moe.cl", "rmsnorm.cl", "test_ops.cl")
#: Debian's matching clang / llvm-spirv pairs, newest first; unversioned names last.
TOOLCHAINS = (("clang-15", "llvm-spirv-15"), ("clang-14", "llvm-spirv-14"), ("clang", "llvm-spirv"))
#: LLVM passes stay off (-disable-llvm-passes): llvm-spirv 14/15 cannot translate the `freeze`
#: that -O2 introduces, and the runtime optimizes the module for its device anyway.
CLANG_FLAGS = ("-x", "cl", "-cl-std=CL2.0", "-target", "spir64", "-emit-llvm", "-c", "-O2",
               "-Xclang", "-disable-llvm-passes", "-Xclang", "-finclude-default-header", "-cl-fp32-correctly-rounded-divide-sqrt",
               "-ffp-contract=off")
#: Every entry point gets ExecutionMode ContractionOff, whatever the translator would infer.
TRANSLATOR_FLAGS = ("--spirv-fp-contract=off",)
#: Options for the runtime's SPIR-V -> device code step: no fast math, exact division and sqrt.
RUNTIME_OPTIONS = "-cl-fp32-correctly-rounded-divide-sqrt"


def _hexf(x) -> str:
    return float(np.float32(x)).hex() + "f"


def numerics_defines(lanes_per_item: int) -> dict[str, str]:
    """-D definitions for the kernels, written from contracts.numerics."""
    d = {"LANES": str(numerics.LANES), "LPI": str(lanes_per_item),
         "EXP_LO": _hexf(numerics.EXP_LO), "EXP_HI": _hexf(numerics.EXP_HI),
         "LOG2E": _hexf(numerics.LOG2E), "ROUND_MAGIC": _hexf(numerics.ROUND_MAGIC),
         "LN2_HI": _hexf(numerics.LN2_HI), "LN2_LO": _hexf(numerics.LN2_LO)}
    for i, c in enumerate(numerics.EXP_POLY):
        d[f"EXP_C{i}"] = _hexf(c)
    for i, c in enumerate(numerics.LOG1P_POLY):
        d[f"LOG1P_C{i}"] = _hexf(c)
    from ...contracts import act_qdq, moe_gate
    d.update(AMAX_FLOOR=_hexf(act_qdq.AMAX_FLOOR), INV_E4M3_MAX=_hexf(act_qdq.INV_E4M3_MAX),
             GATE_EPS=_hexf(moe_gate.NORM_EPS))
    return d


def source() -> str:
    return "\n".join((KERNEL_DIR / name).read_text() for name in SOURCES)


def find_toolchain() -> tuple[str, str]:
    for clang, translator in TOOLCHAINS:
        c, t = shutil.which(clang), shutil.which(translator)
        if c and t:
            return c, t
    raise DriverUnavailable("level-zero driver needs clang and llvm-spirv to build its SPIR-V kernels "
                            "(Debian: apt-get install clang-15 llvm-spirv-15)")


def _version(tool: str) -> str:
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def cache_dir() -> Path:
    return kernel_cache("spirv")


def build(lanes_per_item: int = 1, cache: Path | None = None) -> bytes:
    """The SPIR-V module of every kernel, from the cache when its key matches."""
    clang, translator = find_toolchain()
    defines = numerics_defines(lanes_per_item)
    flags = [*CLANG_FLAGS, *(f"-D{k}={v}" for k, v in sorted(defines.items()))]
    src = source()
    key = hashlib.sha256("\0".join([src, *flags, *TRANSLATOR_FLAGS, _version(clang),
                                     _version(translator)]).encode()).hexdigest()
    cache = cache or cache_dir()
    path = cache / f"{key}.spv"
    if path.is_file():
        return path.read_bytes()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cl, bc, spv = (Path(tmp) / n for n in ("kernels.cl", "kernels.bc", "kernels.spv"))
        cl.write_text(src)
        _run([clang, *flags, str(cl), "-o", str(bc)], "clang")
        _run([translator, *TRANSLATOR_FLAGS, str(bc), "-o", str(spv)], "llvm-spirv")
        data = spv.read_bytes()
    write_atomic(path, data)  # concurrent builders write the same bytes
    return data


def _run(cmd: list[str], what: str) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        first = (res.stderr.strip().splitlines() or ["no message"])[0]
        raise BuildError(f"{what} failed to build the level-zero kernels: {first}")
