"""Checked access to the CUDA driver API (cuda-python): every call's result becomes a clear error."""

from __future__ import annotations

import os
import time

from ...errors import BuildError, DriverUnavailable, UsageError


class CudaError(BuildError):
    """A CUDA call failed on a driver that is present (exit 4); the message names the call and the
    driver's error string. An absent library, driver or device is DriverUnavailable (exit 3) instead."""


def load():
    """Import the bindings and initialise the driver; DriverUnavailable (exit 3) when impossible."""
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        try:
            from cuda import cuda as cu  # cuda-python 12.x layout
        except ImportError:
            raise DriverUnavailable("cuda driver unavailable: cuda-python is not installed (pip install '.[cuda]')") from None
    try:
        err, = cu.cuInit(0)
    except Exception as e:  # the bindings raise when libcuda itself is missing
        raise DriverUnavailable(f"cuda driver unavailable: no NVIDIA driver library ({str(e).splitlines()[0]})") from None
    if int(err) != 0:
        raise DriverUnavailable(f"cuda driver unavailable: cuInit failed ({_name(cu, err)})")
    err, n = cu.cuDeviceGetCount()
    if int(err) != 0 or n == 0:
        raise DriverUnavailable("cuda driver unavailable: no CUDA device found")
    return cu


def _name(cu, err) -> str:
    try:
        e2, s = cu.cuGetErrorString(err)
        return f"{getattr(err, 'name', err)}: {s.decode() if isinstance(s, bytes) else s}"
    except Exception:
        return str(err)


class Checked:
    """cu.<fn>(...) with the status checked: returns the remaining results (one value or a tuple)."""

    def __init__(self, cu):
        self._cu = cu
        #: The raw bindings module, for its types and enums (CUDA_KERNEL_NODE_PARAMS, CUipcMemHandle, ...).
        self.bindings = cu

    def stream_done(self, stream) -> bool:
        """cuStreamQuery: True when the stream's work is done, False while it runs; raises otherwise."""
        err, = self._cu.cuStreamQuery(stream)
        if err == self._cu.CUresult.CUDA_ERROR_NOT_READY:
            return False
        if int(err) != 0:
            raise CudaError(f"cuStreamQuery failed: {_name(self._cu, err)}")
        return True

    def __getattr__(self, name):
        fn = getattr(self._cu, name)
        if not callable(fn) or not name.startswith("cu"):
            return fn

        def call(*args):
            res = fn(*args)
            err, rest = res[0], res[1:]
            if int(err) != 0:
                raise CudaError(f"{name} failed: {_name(self._cu, err)}")
            if not rest:
                return None
            return rest[0] if len(rest) == 1 else rest
        return call


#: Work on a stream not done after this many seconds is taken for a kernel that never ends
#: (DECODER_SHELL_CUDA_DEADLINE_S). A cycle takes milliseconds; the first epoch of a session seconds.
DEADLINE_S = 60.0


class KernelHang(CudaError):
    """A stream's work did not finish by the deadline: a kernel that does not end (exit 4, a broken
    kernel). The kernel still runs, and freeing device memory waits for the whole device, so after it
    no session frees anything (context_hung); ending the process ends the kernel."""


_hung: list[str] = []  # what did not finish, once a KernelHang was raised in this process


def context_hung() -> bool:
    """Whether a kernel of this process never ended (nothing may wait for the device after it)."""
    return bool(_hung)


def deadline_s() -> float:
    text = os.environ.get("DECODER_SHELL_CUDA_DEADLINE_S", "")
    try:
        value = float(text) if text else DEADLINE_S
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise UsageError(f"DECODER_SHELL_CUDA_DEADLINE_S={text}: expected seconds, a positive number")
    return value


def finish(cu: Checked, stream, what: str) -> None:
    """cuStreamSynchronize with a deadline (the driver has none): the stream is polled, with sleeps
    growing from 20 us to 1 ms between polls, so a hung kernel becomes KernelHang instead of a process
    that never returns. Device times come from events, which the polling does not touch."""
    limit = deadline_s()
    start, nap = time.monotonic(), 20e-6
    while not cu.stream_done(stream):
        if time.monotonic() - start > limit:
            _hung.append(what)
            raise KernelHang(f"{what} did not finish within {limit:g} s (DECODER_SHELL_CUDA_DEADLINE_S): a kernel "
                             f"that does not end")
        time.sleep(nap)
        nap = min(2 * nap, 1e-3)
