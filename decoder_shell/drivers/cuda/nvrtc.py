"""NVRTC compilation for the device's own architecture, cached on disk by source hash.

A compile error is a BuildError (exit 4) carrying NVRTC's log; the program is destroyed on every
path. Status values are reported by their names (NVRTC_ERROR_COMPILATION, ...), never as raw enums.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

from ...atomic import write_atomic
from ...errors import BuildError, DriverUnavailable
from ..cache import cache_dir as kernel_cache

#: Exactness flags: no FMA contraction, IEEE division and square root, denormals kept.
EXACT_FLAGS = ("-fmad=false", "--prec-div=true", "--prec-sqrt=true", "--ftz=false", "--std=c++17")
#: The deliberately inexact build (gate candidate `fma`): contraction allowed.
FMA_FLAGS = ("-fmad=true", "--prec-div=true", "--prec-sqrt=true", "--ftz=false", "--std=c++17", "-DFMA_VARIANT")


def cache_dir() -> Path:
    return kernel_cache("cubin")


def cuda_include_dirs() -> tuple[str, ...]:
    """Where the toolkit's headers (cuda_bf16.h, ...) live, for user kernel sources that include them."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    return tuple(f"-I{r}/include" for r in roots if r and os.path.exists(os.path.join(r, "include", "cuda_bf16.h")))[:1]


def bindings():
    """cuda-python's NVRTC module and the library's (major, minor); DriverUnavailable when absent."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc
        except ImportError:
            raise DriverUnavailable("cuda driver unavailable: NVRTC bindings missing (pip install '.[cuda]')") from None
    try:
        _, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:
        raise DriverUnavailable(f"cuda driver unavailable: NVRTC library not found ({str(e).splitlines()[0]})") from None
    return nvrtc, (major, minor)


def status_name(nvrtc, res) -> str:
    """NVRTC_ERROR_COMPILATION (and NVRTC's own text for it), not `<nvrtcResult...: 6>`."""
    name = getattr(res, "name", None) or str(res)
    try:
        text = nvrtc.nvrtcGetErrorString(res)
        text = text[-1] if isinstance(text, tuple) else text
        text = text.decode() if isinstance(text, bytes) else str(text)
    except Exception:
        text = ""
    return f"{name} ({text})" if text and text != name else name


def tuning_defines() -> list[str]:
    """DECODER_SHELL_CUDA_DEFINES (tuning and timing runs only): NAME or NAME=VALUE tokens every build gets as -D."""
    return os.environ.get("DECODER_SHELL_CUDA_DEFINES", "").split()


def tuning_define(name: str, default: str) -> str:
    """The value a build sees for `name` (the host's side of a define it must agree on): "1" where given
    without a value, `default` where not given."""
    given = dict((d.split("=", 1) + ["1"])[:2] for d in tuning_defines())
    return given.get(name, default)


def compile_cubin(source: str, arch: str, flags=EXACT_FLAGS, name: str = "kernels.cu") -> bytes:
    """Compile CUDA C source to a cubin for `arch` (e.g. 'sm_90'); cached by hash of everything."""
    nvrtc, (major, minor) = bindings()
    opts = [f"--gpu-architecture={arch}", *flags, *(f"-D{d}" for d in tuning_defines())]
    if os.environ.get("DECODER_SHELL_CUDA_LINEINFO"):  # profiling: source lines for Nsight Compute / nvdisasm -g
        opts.append("-lineinfo")
    key = hashlib.sha256("\0".join([source, *opts, f"{major}.{minor}"]).encode()).hexdigest()
    path = cache_dir() / f"{key}.cubin"
    if path.exists():
        return path.read_bytes()

    cubin, _ = _compile(nvrtc, source, opts, arch, name)
    write_atomic(path, cubin)
    return cubin


def _compile(nvrtc, source: str, opts: list, arch: str, name: str) -> tuple[bytes, str]:
    """One NVRTC program: (cubin, log); a compile error is a BuildError carrying the log."""
    def check(res, what):
        if int(res[0]) != 0:
            raise BuildError(f"{name}: {what} failed: {status_name(nvrtc, res[0])}")
        return res[1:] if len(res) > 2 else (res[1] if len(res) == 2 else None)

    prog = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        res = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        size = check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        log = bytearray(size)  # never `b" " * size`: at size 1 that is the interpreter's shared b" "
        nvrtc.nvrtcGetProgramLog(prog, log)
        text = log.decode(errors="replace").strip("\0 \n")
        if int(res[0]) != 0:
            raise BuildError(f"{name}: NVRTC compilation failed for {arch} ({status_name(nvrtc, res[0])}): "
                             f"{text.replace(chr(10), ' | ')[:2000]}")
        size = check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        out = bytearray(size)  # NVRTC writes into it: a fresh, mutable buffer
        check(nvrtc.nvrtcGetCUBIN(prog, out), "nvrtcGetCUBIN")
        cubin = bytes(out)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return cubin, text


def ptxas_report(source: str, arch: str, flags=EXACT_FLAGS, name: str = "kernels.cu") -> dict[str, dict]:
    """Registers, spill bytes, stack and static shared memory of every entry as ptxas reports them (an
    uncached build with -v): {entry: {"registers": n, "spill_stores": b, "spill_loads": b, "stack": b,
    "smem": b}}. A compile error is a BuildError, as in compile_cubin."""
    nvrtc, _ = bindings()
    _, text = _compile(nvrtc, source, [f"--gpu-architecture={arch}", *flags, "--ptxas-options=-v"], arch, name)
    out, entry = {}, None
    for line in text.splitlines():
        if m := re.search(r"Function properties for (\S+)", line):
            entry = m.group(1)
            out.setdefault(entry, {})
        elif entry and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                                       line)):
            out[entry].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif entry and (m := re.search(r"Used (\d+) registers", line)):
            out[entry]["registers"] = int(m.group(1))
            if m := re.search(r"(\d+) bytes smem", line):
                out[entry]["smem"] = int(m.group(1))
    return out


def disassemble(cubin: bytes) -> str:
    """The SASS of a cubin as nvdisasm prints it (-c: code only): nvdisasm from PATH, else the one the
    nvidia-cuda-nvdisasm wheel (the test extra) puts beside this interpreter's packages. Missing: a
    DriverUnavailable; a cubin nvdisasm cannot read: a BuildError with its message."""
    tool = shutil.which("nvdisasm") or str(Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cu13" / "bin" / "nvdisasm")
    if not Path(tool).exists():
        raise DriverUnavailable("nvdisasm not found: the test extra installs nvidia-cuda-nvdisasm")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(cubin)
        r = subprocess.run([tool, "-c", str(path)], capture_output=True, text=True)
    if r.returncode:
        raise BuildError(f"nvdisasm: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    return r.stdout


_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def sass_instructions(sass: str, entry: str | None = None) -> list[tuple[str, str]]:
    """(offset, instruction) of disassemble's text in code order, of one function (`entry`) or of all; an
    instruction keeps its predicate guard (@P0, @!P1 ...) in front."""
    if entry is not None:
        head = f".text.{entry}:"
        sass = sass[sass.index(head) + len(head):]
        sass = sass[:sass.index(".section")] if ".section" in sass else sass
    return [(m.group(1), m.group(2)) for m in map(_SASS_LINE.search, sass.splitlines()) if m]


def sass_opcode(ins: str) -> tuple[str, str]:
    """An instruction's opcode and operands, past its predicate guard."""
    parts = ins.split(None, 1)
    if parts and parts[0].startswith("@"):
        parts = parts[1].split(None, 1) if len(parts) > 1 else [""]
    return parts[0], parts[1] if len(parts) > 1 else ""
