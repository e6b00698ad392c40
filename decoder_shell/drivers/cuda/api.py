"""Checked access to the CUDA driver API (cuda-python): every call's result becomes a clear error."""

from __future__ import annotations

from ...errors import BuildError, DriverUnavailable


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
