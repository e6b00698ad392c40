"""What the exhaustive device checks (tools/bf16_check.py, tools/div_check.py) share: their kernels built over
kernels.py's SOURCE (so they run the kernels' own functions), a launch, and the tool's ending: one line and exit 3
without a CUDA device, the results as JSON where asked."""

from __future__ import annotations

import ctypes as C
import json
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoder_shell.drivers.cuda.kernels import SOURCE  # noqa: E402
from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin  # noqa: E402


@contextmanager
def check_module(kernel: str, name: str):
    """(driver, its cuda bindings, the module of kernels.py's SOURCE + `kernel`), unloaded on leaving."""
    from decoder_shell.drivers import get_driver
    drv = get_driver("cuda", placement="emulated")
    cu = drv.cu
    cu.cuCtxSetCurrent(drv.ctx)
    mod = cu.cuModuleLoadData(compile_cubin(SOURCE + kernel, drv.arch, EXACT_FLAGS, name))
    try:
        yield drv, cu, mod
    finally:
        cu.cuModuleUnload(mod)


def launch(cu, func, grid: int, args: list, block: int = 256) -> None:
    """One launch of `func` on the default stream, its arguments ctypes values."""
    params = (C.c_void_p * len(args))(*[C.addressof(a) for a in args])
    cu.cuLaunchKernel(func, grid, 1, 1, block, 1, 1, 0, 0, C.addressof(params), 0)


def results_or_exit(tool: str, run, json_path: Path | None) -> dict:
    """run()'s results, written to json_path where given; without a CUDA device one line and exit 3."""
    from decoder_shell.errors import DriverUnavailable
    try:
        res = run()
    except DriverUnavailable as e:
        print(f"{tool}: {e}", file=sys.stderr)
        sys.exit(3)
    if json_path:
        json_path.write_text(json.dumps(res, indent=1))
    return res
