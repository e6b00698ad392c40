"""How much memory a replay or verify of a corpus needs, checked against the host before any of it
is allocated.

Every size follows from the geometry in corpus.json (ops.py's tensor list), so a valid but huge
geometry (a 148 KB corpus.json can declare 64 ranks of hidden 65536) is refused with one line
instead of filling the host. The estimate counts every tensor of every rank's manifests once for
the captured values, once for the device buffers, once for the expected values, and once more for
the contracts' temporaries, plus a fixed allowance for the interpreter and libraries.
"""

from __future__ import annotations

import os

from ..commands.ops import op_tensors
from ..errors import UsageError

COPIES = 4
BASE_BYTES = 256 << 20
GIB = 1 << 30


def referenced_bytes(g) -> int:
    """Bytes of every tensor named by every (rank, boundary) manifest of geometry `g`."""
    from .manifest import DTYPES
    per_rank = 0
    for b in g.boundaries():
        for t in op_tensors(b, g):
            n = DTYPES[t.dtype].itemsize
            for s in t.shape:
                n *= s
            per_rank += n
    return per_rank * g.ranks


def needed_bytes(g) -> int:
    return COPIES * referenced_bytes(g) + BASE_BYTES


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else free physical pages, capped by this process's
    address-space limit (ulimit -v) when one is set; None when unknown."""
    have = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    have = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if have is None:
        try:
            have = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            room = soft - _vm_size()
            have = room if have is None else min(have, room)
    except (ImportError, OSError, ValueError):
        pass
    return have


def _vm_size() -> int:
    """Address space this process already uses (VmSize), 0 where unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def require_memory(corpus, what: str) -> None:
    need = needed_bytes(corpus.geometry)
    have = available_bytes()
    if have is not None and need > have:
        raise UsageError(f"{corpus.root}: a {what} of this corpus needs about {need / GIB:.1f} GiB of memory, "
                         f"this host has {have / GIB:.1f} GiB available")
