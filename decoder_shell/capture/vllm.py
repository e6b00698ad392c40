"""vLLM general-plugin entry point (`vllm.general_plugins` -> decoder_shell_capture).

vLLM calls register() in every process it starts, in each worker from `init_worker`, before
torch.distributed exists. With DECODER_SHELL_CAPTURE=1 it only patches, and installs nothing yet:
  - Worker.init_device: the plugin is installed after it, as rank tp_rank of the TP group;
  - GPUModelRunner (V2): execute_model marks verify, the speculator's propose marks draft;
  - the mHC functions DeepSeek-V4's modules import by name (capture/vllm_mhc.py): checked and wrapped
    now, bound in their place only while an armed phase runs.
Other vLLM versions are refused in one line naming the version expected; the service runs on.
"""

from __future__ import annotations

import os
import sys

SUPPORTED = "0.33."  # the vLLM minor version whose sources these patches were written against


def register() -> None:
    if os.environ.get("DECODER_SHELL_CAPTURE") != "1":
        return
    reason = patch()
    if reason:
        print(f"decoder-shell capture: not installed in pid {os.getpid()}: {reason}", file=sys.stderr)


def patch() -> str | None:
    """Apply every patch; returns why none could be applied (one line), or None."""
    import vllm
    if not vllm.__version__.startswith(SUPPORTED):
        return f"vLLM {vllm.__version__} is not supported (expected vLLM {SUPPORTED}x)"
    try:
        from vllm.v1.worker.gpu.model_runner import GPUModelRunner
        from vllm.v1.worker.gpu_worker import Worker

        from .vllm_mhc import install_hooks
        from .vllm_runner import patch_init_device, patch_runner
        install_hooks()
    except (ImportError, LookupError, AttributeError) as e:
        return f"vLLM {vllm.__version__} lacks what the capture hooks expect ({type(e).__name__}: {e})"
    patch_init_device(Worker)
    patch_runner(GPUModelRunner)
    return None
