"""Writers never destroy: one lock per corpus, a staging folder beside it, one atomic swap.

Every writer of a corpus (synth, capture, `verify --record`) holds an fcntl lock on `.<name>.lock`
beside the corpus folder for as long as it writes; a second writer is refused with one line naming
the holder's pid. A new corpus is written into `.<name>.staging-<pid>-<id>` beside the target and
published only once it is complete: renamed into place when the target does not exist, or swapped
with the old one by one `renameat2(RENAME_EXCHANGE)` (`--replace`); the old one is deleted after.
A kill at any moment therefore leaves the old corpus or the new one under the target's name, never
a mix; a staging folder a killed writer left behind is removed by the next writer (which holds the
lock, so no writer can still be using it). Where the exchange is not available (not Linux, or a file
system without it) the swap is two renames, and the next writer moves the old corpus back if a
kill fell between them.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path

from ..errors import CorpusError, UsageError

RENAME_EXCHANGE = 2
AT_FDCWD = -100


class CorpusLock:
    """An exclusive fcntl lock on `<parent>/.<name>.lock`; the file holds the holder's pid."""

    def __init__(self, target: Path):
        self.target = Path(os.path.realpath(target))  # a corpus reached through a link has one lock
        self.path = self.target.parent / f".{self.target.name}.lock"
        self.fd: int | None = None

    def acquire(self, create_parent: bool = True) -> "CorpusLock":
        try:
            if create_parent:
                self.target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise UsageError(f"{self.path}: cannot create the corpus lock ({e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UsageError(f"{self.target}: another writer holds this corpus (pid {holder}); "
                             "wait for it to finish") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the lock; the file stays (deleting it would race)
            self.fd = None


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where the call is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    if fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_empty_target(target: Path) -> bool:
    """True when `target` does not exist or is an empty folder."""
    if not os.path.lexists(target):
        return True
    if target.is_symlink() or not target.is_dir():
        raise UsageError(f"{target}: exists and is not a folder; choose another --out")
    return not any(target.iterdir())


class Staging:
    """One writer's staging folder for `target`, under the target's lock. begin, write, publish or abandon."""

    def __init__(self, target: Path, replace: bool = False):
        self.target = Path(os.path.realpath(target))  # replace the folder a link names, never the link
        self.replace = replace
        self.lock = CorpusLock(self.target)
        self.dir: Path | None = None

    def begin(self) -> Path:
        self.lock.acquire()
        try:
            self._recover()
            if not is_empty_target(self.target) and not self.replace:
                raise UsageError(f"{self.target}: folder is not empty; pass --replace to swap the new corpus "
                                 "in atomically, or choose another --out")
            self.dir = self.target.parent / f".{self.target.name}.staging-{os.getpid()}-{secrets.token_hex(4)}"
            self.dir.mkdir()
        except OSError as e:
            self.lock.release()
            raise UsageError(f"{self.target.parent}: cannot create a staging folder ({e.strerror or e})") from None
        except BaseException:
            self.lock.release()
            raise
        return self.dir

    def _recover(self) -> None:
        """Under the lock: put back an old corpus a killed two-rename swap left aside, drop stale staging."""
        parent, name = self.target.parent, self.target.name
        for p in sorted(parent.glob(f".{name}.old-*")):
            if not os.path.lexists(self.target):
                os.rename(p, self.target)
            else:
                shutil.rmtree(p, ignore_errors=True)
        for p in parent.glob(f".{name}.staging-*"):
            shutil.rmtree(p, ignore_errors=True)

    def publish(self) -> None:
        """Make the staged corpus the target's content in one step; the old one is removed after."""
        try:
            _fsync_dir(self.dir)
            if not os.path.lexists(self.target):
                os.rename(self.dir, self.target)
                self.dir = None
            elif _exchange(self.dir, self.target):
                pass  # self.dir now holds the old corpus
            else:
                aside = self.target.parent / f".{self.target.name}.old-{os.getpid()}"
                os.rename(self.target, aside)
                os.rename(self.dir, self.target)
                self.dir = aside
            _fsync_dir(self.target.parent)
        except OSError as e:
            raise UsageError(f"{self.target}: cannot publish the new corpus ({e.strerror or e}); "
                             "the previous content is unchanged") from None
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Drop the staging folder (or the swapped-out old corpus) and release the lock."""
        try:
            if self.dir is not None:
                shutil.rmtree(self.dir, ignore_errors=True)
                self.dir = None
        finally:
            self.lock.release()


@contextmanager
def staged(target: Path, replace: bool = False):
    """`with staged(out, replace) as folder:` write a corpus into `folder`; published when the block ends."""
    s = Staging(target, replace)
    folder = s.begin()
    try:
        yield folder
    except BaseException:
        s.abandon()
        raise
    s.publish()


@contextmanager
def locked(target: Path):
    """Hold `target`'s writer lock (for writers that replace a single file, like `verify --record`);
    the corpus must exist already, so no folder is created for the lock."""
    if not Path(target).is_dir():
        raise CorpusError(f"{target}: corpus folder does not exist")
    lock = CorpusLock(target).acquire(create_parent=False)
    try:
        yield
    finally:
        lock.release()
