"""Where drivers cache built kernels: one rule for every kind (NVRTC cubins, SPIR-V modules).

$DECODER_SHELL_CACHE/<kind> when set, else $XDG_CACHE_HOME/decoder-shell/<kind>, else
~/.cache/decoder-shell/<kind>. Entries are named by a hash of everything that makes them and
written atomically, so concurrent builders and a crash never leave a half-written entry.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(kind: str) -> Path:
    base = os.environ.get("DECODER_SHELL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "decoder-shell")
    return Path(base) / kind
