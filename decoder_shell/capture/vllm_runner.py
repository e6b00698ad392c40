"""vLLM 0.33 worker side: install the plugin in each TP rank, mark draft and verify, refuse hidden steps.

- Install: general plugins load in `init_worker`, before torch.distributed exists and without RANK or
  WORLD_SIZE, so the plugin is installed right after `Worker.init_device`, with the rank and size of
  the tensor-parallel group from `vllm.distributed` and that group's names as the only all-reduces
  that belong to the cycle.
- Phases (model runner V2): `speculator.propose` is the draft of step N, the target forward in
  `execute_model` of step N+1 its verify; a cycle opens at the draft and closes after that verify.
  Only inside an armed phase are the mHC wrappers bound (vllm_mhc.bound).
  `capture.cycle()` runs on every draft of every rank (an integer increment while disarmed) so that
  all ranks count cycles alike, which is what the arming protocol relies on.
- CUDA graphs replay `vllm::all_reduce` without Python: an arm is refused, with the --enforce-eager
  hint, when the service runs its steps under graphs.
"""

from __future__ import annotations

import functools
import os
import sys

from ..contracts.mhc import MhcParams
from . import _NULL as NULL
from ..geometry import Geometry
from .recorder import TpGroup
from .vllm_mhc import bound

ARCHITECTURES = ("DeepseekV4ForCausalLM",)
_PACKAGE = "decoder_shell.capture"


class _Open:
    """The cycle context a draft opened and the next verify closes (one per process)."""

    cycle = None


_open = _Open()


def geometry_of(vllm_config, world: int) -> Geometry:
    """The cycle geometry a DeepSeek-V4 service with MTP serves, for one request.

    Verify runs 1 + k rows (k speculative tokens); the first MTP pass runs over the same padded rows,
    the k-1 one-row passes after it are not part of the cycle."""
    hf = vllm_config.model_config.hf_config
    spec = vllm_config.speculative_config
    k = int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec is not None else 0
    hidden, layers = int(hf.hidden_size), int(hf.num_hidden_layers)
    name = {(4096, 43): "dsv4-flash", (7168, 61): "dsv4-pro"}.get((hidden, layers), "vllm")
    return Geometry(preset=name, hidden=hidden, layers=layers, ranks=world, verify_rows=1 + k,
                    draft_rows=1 + k if k else 0, draft_kind="vllm-mtp", hc=int(hf.hc_mult),
                    reduce_dtype="bfloat16", fused_norm=True,
                    mhc=MhcParams(hc_eps=float(hf.hc_eps), norm_eps=float(hf.rms_norm_eps),
                                  sinkhorn_iters=int(hf.hc_sinkhorn_iters)))


def check_model(vllm_config) -> str | None:
    """Why this service cannot be captured (one line), or None."""
    archs = tuple(getattr(vllm_config.model_config.hf_config, "architectures", None) or ())
    if not set(archs) & set(ARCHITECTURES):
        return f"model {', '.join(archs) or '(no architecture)'} is not one of {', '.join(ARCHITECTURES)}"
    pc = vllm_config.parallel_config
    if pc.pipeline_parallel_size != 1 or pc.data_parallel_size != 1:
        return (f"pipeline {pc.pipeline_parallel_size} x data {pc.data_parallel_size} parallel: only tensor "
                "parallelism is captured (expected --pipeline-parallel-size 1 --data-parallel-size 1)")
    if not getattr(vllm_config, "use_v2_model_runner", False):
        return "draft and verify are marked in model runner V2 only (set VLLM_USE_V2_MODEL_RUNNER=1)"
    return None


def eager_refusal(vllm_config):
    """An arm check: refuses while the service replays its steps as CUDA graphs."""
    from vllm.config import CUDAGraphMode
    mode = vllm_config.compilation_config.cudagraph_mode
    graphs = not vllm_config.model_config.enforce_eager and mode not in (None, CUDAGraphMode.NONE)

    def check(_geometry):
        if graphs:
            return (f"this vLLM service runs its steps as CUDA graphs (cudagraph_mode {mode.name}), which "
                    "replay all-reduces out of Python's sight; restart it with --enforce-eager to capture")
        return None
    return check


def install_in_tp_rank(vllm_config):
    """Install this worker's plugin as rank `tp_rank` of `tp_size` (called after init_device)."""
    import vllm
    from vllm.distributed import get_tp_group
    tp = get_tp_group()
    run_dir = os.environ.get("DECODER_SHELL_CAPTURE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "decoder-shell", f"vllm-{vllm_config.instance_id or 'local'}")
    plugin = install_for_group(tp, run_dir=run_dir, geometry=geometry_of(vllm_config, tp.world_size),
                               service={"name": "vllm", "version": vllm.__version__,
                                        "model": str(vllm_config.model_config.model)})
    plugin.arm_check = eager_refusal(vllm_config)
    return plugin


def install_for_group(tp, **install_kwargs):
    """Install the plugin as rank `tp.rank_in_group` of vLLM GroupCoordinator `tp`, recording only
    that group's all-reduces (vllm::all_reduce by its unique name, c10d by its device group's name)."""
    from .. import capture
    plugin = capture.install(rank=tp.rank_in_group, world=tp.world_size, **install_kwargs)
    plugin.group = TpGroup(vllm=tp.unique_name, c10d=tp.device_group.group_name)
    plugin.probe = functools.partial(_probe, tp)
    return plugin


def _probe(tp, x):
    """A probe all-reduce through the group's own path (custom all-reduce, NCCL or gloo, as served)."""
    from .tensors import to_numpy, to_torch
    return to_numpy(tp.all_reduce(to_torch(x).to(tp.device)))


def patch_init_device(worker_cls) -> None:
    orig = worker_cls.init_device
    if getattr(orig, "_decoder_shell_hook", None):
        return

    @functools.wraps(orig)
    def init_device(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        reason = check_model(self.vllm_config)
        if reason:
            print(f"decoder-shell capture: not installed in pid {os.getpid()}: {reason}", file=sys.stderr)
        else:
            install_in_tp_rank(self.vllm_config)
        return out

    init_device._decoder_shell_hook = "init_device"
    worker_cls.init_device = init_device


def draft(fn):
    """Wrap a speculator's propose: the draft phase, opening this rank's next cycle."""
    package = sys.modules[_PACKAGE]

    @functools.wraps(fn)
    def propose(*args, **kwargs):
        p = package._plugin
        if p is None:
            return fn(*args, **kwargs)
        if _open.cycle is not None:  # a draft no verify followed (the request ended): its cycle ends here
            _close(None)
        ctx = p.cycle()
        if ctx is NULL:
            return fn(*args, **kwargs)
        ctx.__enter__()
        _open.cycle = ctx
        try:
            with p.phase("draft"), bound():
                return fn(*args, **kwargs)
        except BaseException as e:
            _close(e)
            raise

    propose._decoder_shell_hook = "propose"
    return propose


def verify(fn):
    """Wrap the target step (execute_model): the verify phase, closing the cycle its draft opened."""
    package = sys.modules[_PACKAGE]

    @functools.wraps(fn)
    def execute_model(*args, **kwargs):
        if _open.cycle is None:
            return fn(*args, **kwargs)
        try:
            with package._plugin.phase("verify"), bound():
                out = fn(*args, **kwargs)
        except BaseException as e:
            _close(e)
            raise
        _close(None)
        return out

    execute_model._decoder_shell_hook = "execute_model"
    return execute_model


def _close(exc) -> None:
    ctx, _open.cycle = _open.cycle, None
    if ctx is not None:
        ctx.__exit__(None if exc is None else type(exc), exc, None if exc is None else exc.__traceback__)


def patch_runner(runner_cls) -> None:
    """GPUModelRunner (V2): execute_model is the verify; the speculator made in load_model drafts."""
    if getattr(runner_cls.execute_model, "_decoder_shell_hook", None):
        return
    runner_cls.execute_model = verify(runner_cls.execute_model)
    load = runner_cls.load_model

    @functools.wraps(load)
    def load_model(self, *args, **kwargs):
        out = load(self, *args, **kwargs)
        spec = getattr(self, "speculator", None)
        if spec is not None:
            spec.propose = draft(spec.propose)
        return out

    load_model._decoder_shell_hook = "load_model"
    runner_cls.load_model = load_model
