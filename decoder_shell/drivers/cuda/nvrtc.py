"""NVRTC compilation for the device's own architecture, cached on disk by source hash."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ...errors import DriverUnavailable
from .api import CudaError

#: Exactness flags: no FMA contraction, IEEE division and square root, denormals kept.
EXACT_FLAGS = ("-fmad=false", "--prec-div=true", "--prec-sqrt=true", "--ftz=false", "--std=c++17")
#: The deliberately inexact build (gate candidate `fma`): contraction allowed.
FMA_FLAGS = ("-fmad=true", "--prec-div=true", "--prec-sqrt=true", "--ftz=false", "--std=c++17", "-DFMA_VARIANT")


def cache_dir() -> Path:
    base = os.environ.get("DECODER_SHELL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "decoder-shell")
    return Path(base) / "cubin"


def cuda_include_dirs() -> tuple[str, ...]:
    """Where the toolkit's headers (cuda_bf16.h, ...) live, for user kernel sources that include them."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    return tuple(f"-I{r}/include" for r in roots if r and os.path.exists(os.path.join(r, "include", "cuda_bf16.h")))[:1]


def compile_cubin(source: str, arch: str, flags=EXACT_FLAGS, name: str = "kernels.cu") -> bytes:
    """Compile CUDA C source to a cubin for `arch` (e.g. 'sm_90'); cached by hash of everything."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc
        except ImportError:
            raise DriverUnavailable("cuda driver unavailable: NVRTC bindings missing (pip install '.[cuda]')") from None
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:
        raise DriverUnavailable(f"cuda driver unavailable: NVRTC library not found ({str(e).splitlines()[0]})") from None
    extra = os.environ.get("DECODER_SHELL_CUDA_DEFINES", "").split()  # timing ablations only
    opts = [f"--gpu-architecture={arch}", *flags, *(f"-D{d}" for d in extra)]
    key = hashlib.sha256("\0".join([source, *opts, f"{major}.{minor}"]).encode()).hexdigest()
    path = cache_dir() / f"{key}.cubin"
    if path.exists():
        return path.read_bytes()

    def check(res, what):
        if int(res[0]) != 0:
            raise CudaError(f"{what} failed: {res[0]}")
        return res[1:] if len(res) > 2 else (res[1] if len(res) == 2 else None)

    prog = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    res = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
    if int(res[0]) != 0:
        size = check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise CudaError("NVRTC compilation failed: " + log.decode(errors="replace").strip().replace("\n", " | ")[:2000])
    size = check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
    cubin = b" " * size
    check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
    nvrtc.nvrtcDestroyProgram(prog)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(cubin)
    os.replace(tmp, path)
    return cubin
