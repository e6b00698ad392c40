"""Errors the CLI turns into one line and an exit code (never a traceback)."""


class ShellError(Exception):
    """Base error: `exit_code` is what `shell` exits with."""

    exit_code = 2


class UsageError(ShellError):
    """Bad arguments or input the user can fix (exit 2)."""


class CorpusError(ShellError):
    """A corpus file is corrupt, missing, malformed or unsafe (exit 2); the message names the file."""


class DriverUnavailable(ShellError):
    """The requested driver or device is not present on this machine (exit 3)."""

    exit_code = 3


class BuildError(ShellError):
    """A kernel failed to build, load or run on a driver that is present (exit 4): a broken kernel,
    never read as an absent device."""

    exit_code = 4


class KernelHang(BuildError):
    """A device's work did not finish by the deadline (drivers.base.wait_until): a kernel that does not end
    (exit 4, a broken kernel). It still runs, so nothing in the process waits for the device after it."""


class MismatchError(ShellError):
    """A replay or gate found inexact outputs (exit 1)."""

    exit_code = 1
