"""The deadline on device waits (drivers/base.py wait_until, DECODER_SHELL_DEADLINE_S): its setting, and a
kernel that really never ends (kernels/test_ops.cl probe_spin on the level-zero driver's device, Intel's
OpenCL CPU runtime here) turned into one KernelHang line within it, in a process of its own (the kernel
keeps running until that process ends). The cuda driver's own case runs on the GPU (tests/test_cuda.py)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoder_shell.drivers.base import DEADLINE_S, deadline_s
from decoder_shell.errors import UsageError

TEXT = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                 st.text("0123456789.-+eEinfa x", max_size=8))


@settings(max_examples=80, deadline=None)
@given(TEXT)
def test_the_deadline_is_a_positive_number_of_seconds_or_one_line(text):
    """A positive finite number is taken as it is; nothing set is the default; anything else is a
    UsageError naming the variable (exit 2), never a wait without end."""
    old = os.environ.get("DECODER_SHELL_DEADLINE_S")
    os.environ["DECODER_SHELL_DEADLINE_S"] = text
    try:
        try:
            want = float(text) if text else DEADLINE_S
        except ValueError:
            want = None
        if want is not None and want > 0 and math.isfinite(want):
            assert deadline_s() == want
        else:
            with pytest.raises(UsageError, match="DECODER_SHELL_DEADLINE_S"):
                deadline_s()
    finally:
        if old is None:
            os.environ.pop("DECODER_SHELL_DEADLINE_S", None)
        else:
            os.environ["DECODER_SHELL_DEADLINE_S"] = old


SPIN = r"""
import os, sys, time
import numpy as np
from decoder_shell.drivers.level_zero import LevelZeroDriver
from decoder_shell.drivers.level_zero.sycl_session import finish_queue
from decoder_shell.drivers.base import device_hung
from decoder_shell.errors import DriverUnavailable, KernelHang
try:
    t = LevelZeroDriver().target
except DriverUnavailable as e:
    print("unavailable:", e); sys.stdout.flush(); os._exit(3)
import dpctl.memory
flag = dpctl.memory.MemoryUSMDevice(4, queue=t.queue)
flag.copy_from_host(np.zeros(1, np.int32).view(np.uint8))
finish_queue(t.queue, "the flag's copy")  # a queue that ends: no error
t0 = time.monotonic()
t.queue.submit_async(t.program.get_sycl_kernel("probe_spin"), [flag], [1], [1])
try:
    finish_queue(t.queue, "probe_spin")
    print("ended"); code = 1
except KernelHang as e:
    print(f"{time.monotonic() - t0:.2f}", e.exit_code, device_hung(), e); code = 0
sys.stdout.flush()
os._exit(code)  # the kernel still spins: leave without waiting for the queue
"""


def test_a_kernel_that_never_ends_is_a_kernel_hang_by_the_deadline():
    """probe_spin on the level-zero driver's queue with a 2 s deadline: finish_queue (what every wait of
    the SYCL session goes through) raises KernelHang (exit 4) after 2 s and not before, naming what did
    not finish, and marks the process's device as hung."""
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", SPIN], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "DECODER_SHELL_DEADLINE_S": "2"})
    if r.returncode == 3 and not os.environ.get("CI"):
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
    waited, code, hung, message = r.stdout.strip().split(" ", 3)
    assert 2.0 <= float(waited) < 10.0 and code == "4" and hung == "True"
    assert message == ("probe_spin did not finish within 2 s (DECODER_SHELL_DEADLINE_S): a kernel that does not "
                       "end")
    assert time.monotonic() - t0 < 240
