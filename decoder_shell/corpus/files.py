"""Reading corpus files as untrusted input: regular files inside the corpus only, with a size cap.

A corpus may come from anywhere (a copy, an archive, another user), so no read may block (a FIFO),
run without bound (a link to /dev/zero, a 600 MB corpus.json) or leave the corpus (a symlinked
blobs/ folder). Every file is opened without following a final link and without blocking, checked
to be a regular file by fstat on the open descriptor (no race between check and read), and read up
to its cap. JSON is parsed with NaN/Infinity refused; the interpreter's recursion limit bounds
nesting, and a RecursionError is reported like any other malformed file.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from ..errors import CorpusError

MIB = 1 << 20


def inside(root: Path, path: Path) -> Path:
    """`path` with every link resolved; refused unless it is `root`/relative with no link on the way."""
    root_real = Path(os.path.realpath(root))
    rel = Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(root)))
    real = Path(os.path.realpath(path))
    if real != root_real / rel:
        raise CorpusError(f"{path}: is a link or lies behind one (only files inside the corpus are read)")
    return real


def read_regular(path: Path, cap: int, what: str, root: Path | None = None) -> bytes:
    """The bytes of a regular file of at most `cap` bytes; anything else is a CorpusError naming it."""
    path = Path(path)
    if root is not None:
        inside(root, path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise CorpusError(f"{path}: {what} is missing") from None
    except OSError as e:
        reason = "is a link" if e.errno == errno.ELOOP else (e.strerror or str(e))  # O_NOFOLLOW on a link
        raise CorpusError(f"{path}: cannot read {what} ({reason})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise CorpusError(f"{path}: {what} is {kind}")
        if st.st_size > cap:
            raise CorpusError(f"{path}: {what} is {st.st_size} bytes, more than the {cap} allowed")
        chunks, left = [], cap + 1
        while left > 0:
            b = os.read(fd, min(left, 4 * MIB))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        if len(data) > cap:
            raise CorpusError(f"{path}: {what} grew past the {cap} bytes allowed while it was read")
        return data
    except OSError as e:
        raise CorpusError(f"{path}: cannot read {what} ({e.strerror or e})") from None
    finally:
        os.close(fd)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(raw: bytes, path: Path, what: str):
    """JSON -> Python, refusing NaN/Infinity, numbers of thousands of digits and runaway nesting."""
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise CorpusError(f"{path}: {what} is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise CorpusError(f"{path}: {what} is not valid JSON ({getattr(e, 'msg', None) or e})") from None
