"""The driver interface the replay engine and the gate program against.

A driver loads a Cycle into a Session: every buffer of every rank allocated once (fixed addresses for
the session's life), the commands built once (a graph / command list), and then each epoch only
launches. Host writes, reads and poisoning happen outside the timed region.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod

import numpy as np

from ..commands.program import Cycle
from ..errors import DriverUnavailable, KernelHang, UsageError

#: Poison bit patterns (quiet NaNs): an element the cycle fails to write cannot compare equal.
POISON = {1: np.uint8(0xFF), 2: np.uint16(0xFFFF), 4: np.uint32(0xFFFFFFFF)}


def poison_like(shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    return np.full(shape, POISON[dtype.itemsize]).view(dtype)


#: Device work not done after this many seconds is taken for a kernel that never ends
#: (DECODER_SHELL_DEADLINE_S). A cycle takes milliseconds; the first epoch of a session seconds.
DEADLINE_S = 60.0
_hung: list[str] = []  # what did not finish, once a KernelHang was raised in this process


def deadline_s() -> float:
    text = os.environ.get("DECODER_SHELL_DEADLINE_S", "")
    try:
        value = float(text) if text else DEADLINE_S
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise UsageError(f"DECODER_SHELL_DEADLINE_S={text}: expected seconds, a positive number")
    return value


def device_hung() -> bool:
    """Whether a kernel of this process never ended: after it nothing may wait for the device (frees,
    stream or queue waits would wait for ever); ending the process ends the kernel."""
    return bool(_hung)


def wait_until(done, what: str, spin_s: float = 0.0) -> None:
    """Poll `done()` (a stream, event or queue query of the driver) until it is true or the deadline
    passes: then KernelHang (exit 4, one line), never a process that does not return. For the first
    `spin_s` seconds without sleeping (a GPU's millisecond cycle then ends the wait as soon as it ends,
    as the driver's blocking wait would; a CPU device would lose a core to it), then sleeping 20 us
    growing to 1 ms between polls. The device's own timers, not this loop, give the times."""
    limit = deadline_s()
    start, nap = time.monotonic(), 20e-6
    while not done():
        waited = time.monotonic() - start
        if waited > limit:
            _hung.append(what)
            raise KernelHang(f"{what} did not finish within {limit:g} s (DECODER_SHELL_DEADLINE_S): a kernel "
                             f"that does not end")
        if waited > spin_s:
            time.sleep(nap)
            nap = min(2 * nap, 1e-3)


def require_support(cycle: Cycle, driver: str, *, fused_norm: bool, ops: tuple) -> None:
    """Refuse, in one line, a cycle with ops or a fused norm this driver has no kernels for."""
    missing = sorted({c.op for c in cycle.commands} - set(ops))
    if cycle.geometry.fused_norm and not fused_norm:
        missing.append("the fused RMSNorm collapse (fused_norm)")
    if missing:
        raise DriverUnavailable(f"the {driver} driver cannot run {', '.join(missing)} yet; "
                                "replay this corpus with --driver cpu")


class Session(ABC):
    """One loaded cycle on one driver."""

    cycle: Cycle
    #: Whether this driver's times measure the device (False on cpu: gate verdicts say "not meaningful").
    timing_meaningful: bool = True
    #: Why the times are not device cycle times, where they are not (shown next to them).
    timing_note: str = "host numpy times, not device times"

    @abstractmethod
    def write(self, rank: int, buffer_id: int, value: np.ndarray) -> None:
        """Copy a host array into a buffer (untimed)."""

    @abstractmethod
    def read(self, rank: int, buffer_id: int) -> np.ndarray:
        """Copy a buffer back to the host (untimed)."""

    def read_many(self, rank: int, buffer_ids: list[int]) -> list[np.ndarray]:
        """Several buffers of one rank (one round trip where ranks live in other processes)."""
        return [self.read(rank, b) for b in buffer_ids]

    @abstractmethod
    def poison(self) -> None:
        """Fill every output buffer of every rank with the NaN poison pattern."""

    @abstractmethod
    def run(self, graph: bool = True) -> list[float]:
        """Run the whole cycle once; returns each rank's time in milliseconds.

        graph=True launches the prebuilt graph; graph=False launches command by command (eager)."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def refuse_moe(cycle: Cycle, driver: str) -> None:
    """Drivers (or cycle forms) that do not hold the MoE draft commands yet refuse such a cycle in one line."""
    from ..geometry import DENSE_OPS, MOE_OPS
    if any(c.op in MOE_OPS for c in cycle.commands):
        raise UsageError(f"the {driver} driver does not replay the MoE draft commands ({', '.join(MOE_OPS)}) yet; "
                         f"replay this corpus with --driver cpu")
    if any(c.op in DENSE_OPS for c in cycle.commands):
        raise UsageError(f"the {driver} driver does not replay the draft's dense attention commands yet; "
                         f"replay this corpus with --driver cpu")


class Driver(ABC):
    name: str

    @abstractmethod
    def load(self, cycle: Cycle, variants: dict | None = None) -> Session:
        """Allocate and build. `variants` maps command indices to an implementation name the driver
        knows (candidates for the gate); commands not named use the driver's baseline."""

    def describe(self) -> str:
        return self.name
