"""vLLM general-plugin entry point (untested against vLLM here; see docs/CAPTURE.md).

vLLM loads every `vllm.general_plugins` entry point in each of its processes. This one installs the
capture plugin only when DECODER_SHELL_CAPTURE=1, and only in processes that know their rank
(torch.distributed initialised, or RANK and WORLD_SIZE set); elsewhere it does nothing.
"""

from __future__ import annotations

import os
import sys


def register() -> None:
    if os.environ.get("DECODER_SHELL_CAPTURE") != "1":
        return
    from . import install
    from .errors import UsageError
    try:
        install()
    except UsageError as e:  # an engine-core process without a rank: nothing to capture there
        print(f"decoder-shell capture: not installed in pid {os.getpid()}: {e}", file=sys.stderr)
