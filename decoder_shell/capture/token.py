"""The control token: random, written to a file only its owner can read (captured tensors derive
from users' prompts, so arming a capture is as sensitive as reading the prompts)."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from ..atomic import write_atomic
from .errors import UsageError


def default_token_file(port: int) -> Path:
    """Where a service on `port` keeps its token unless told otherwise."""
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "decoder-shell" / f"control-{port}.token"


def create_token_file(path: Path) -> str:
    """Write a fresh token to `path` with mode 0600. A path of the shell's own (default_token_file's
    folder) is replaced atomically, a stale token of an earlier service included; any other path
    must not exist yet (created exclusively, never following a link), so no file the service did not
    create is overwritten."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(32)
    if path.parent == default_token_file(0).parent:
        write_atomic(path, (token + "\n").encode())
        os.chmod(path, 0o600)
        return token
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise UsageError(f"token file {path} already exists; the service never overwrites a file it did not "
                         "create (remove it or pick another --token-file)") from None
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
        f.flush()
        os.fsync(f.fileno())
    return token


def read_token(path: Path) -> str:
    """The token in `path`, refusing a file that others can read or write."""
    path = Path(path)
    try:
        st = path.stat()
        text = path.read_text().strip()
    except FileNotFoundError:
        raise UsageError(f"token file {path} does not exist (is the service running? pass --token-file)") from None
    except OSError as e:
        raise UsageError(f"cannot read token file {path} ({e.strerror})") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(f"token file {path} is accessible by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                         f"run chmod 600 {path}")
    if not text:
        raise UsageError(f"token file {path} is empty")
    return text
