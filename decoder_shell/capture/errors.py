"""Capture errors: one line for the user, with the exit code `shell capture` ends with."""

from ..errors import ShellError, UsageError


class CaptureError(ShellError):
    """The capture did not complete (the service ran another geometry, a rank died, a timeout): exit 1."""

    exit_code = 1


class ServiceUnreachable(UsageError):
    """The control endpoint cannot be reached or refuses the request (exit 2)."""


__all__ = ["CaptureError", "ServiceUnreachable", "UsageError"]
