"""mHC hooks for vLLM 0.33's DeepSeek-V4: wrappers around the functions its model imports by name.

`vllm/models/deepseek_v4/nvidia/model.py` and `mtp.py` call plain functions bound in their module
globals (not modules, not torch.ops), so the only place to see an mHC step is to rebind those
globals. install_hooks() (at register time) checks every name and makes its wrapper; the wrappers are
bound in place of the originals only while an armed phase runs (`bound()`, entered by the phase
markers of capture/vllm_runner.py), so a disarmed service calls vLLM's own functions, untouched.
Each wrapper calls the original first, then hands its arguments and results to the recorder.

What each call becomes (contracts/mhc.py names):
  mhc_pre_broadcast_tilelang   first target layer: streams = broadcast of the reduced embedding -> "hc"
  mhc_pre_tilelang             first MTP layer: hc_pre on the draft's own streams              -> "hc"
  mhc_fused_post_pre_tilelang  hc_post of a sub-block, hc_pre of the next                      -> "hc"
  mhc_post_tilelang            the last hc_post (its x is kept for the head's link check)
  hc_head_fused_kernel_tilelang the head collapse                                              -> "head"
Every hc_pre there fuses the next sub-block's RMSNorm (norm_weight): the geometry's fused_norm.
"""

from __future__ import annotations

import functools
import inspect
import sys

MODEL = "vllm.models.deepseek_v4.nvidia.model"
MTP = "vllm.models.deepseek_v4.nvidia.mtp"
PRE_BROADCAST = "mhc_pre_broadcast_tilelang"
PRE = "mhc_pre_tilelang"
POST_PRE = "mhc_fused_post_pre_tilelang"
POST = "mhc_post_tilelang"
HEAD = "hc_head_fused_kernel_tilelang"
#: module -> the global names wrapped there (mtp.py runs its block through model.py's layer code).
HOOKS = {MODEL: (PRE_BROADCAST, PRE, POST_PRE, POST, HEAD), MTP: (POST, HEAD)}
_PACKAGE = "decoder_shell.capture"


def _hc(rec, name, a, streams, post, comb, y, x=None):
    rec.record_mhc("hc", streams, a["fn"], a["hc_base"], a["hc_scale"], y, post, comb, source=name,
                   norm_weight=a.get("norm_weight"), x=x)


def _pre_broadcast(rec, a, out):
    residual_out, post, comb, y = out
    _hc(rec, PRE_BROADCAST, a, residual_out, post, comb, y, x=a["residual"])


def _pre(rec, a, out):
    post, comb, y = out
    _hc(rec, PRE, a, a["residual"], post, comb, y)


def _post_pre(rec, a, out):
    residual_cur, post, comb, y = out
    _hc(rec, POST_PRE, a, residual_cur, post, comb, y, x=a["x"])


def _post(rec, a, out):
    rec.pending_post_x = a["x"]


def _head(rec, a, out):
    x = getattr(rec, "pending_post_x", None)
    rec.pending_post_x = None
    rec.record_mhc("head", a["hs_flat"], a["fn"], a["hc_base"], a["hc_scale"], out, source=HEAD, x=x)


RECORD = {PRE_BROADCAST: _pre_broadcast, PRE: _pre, POST_PRE: _post_pre, POST: _post, HEAD: _head}


def wrap(name: str, fn):
    """The pass-through wrapper for one of vLLM's mHC functions (idempotent)."""
    if getattr(fn, "_decoder_shell_hook", None) == name:
        return fn
    record = RECORD[name]
    sig = inspect.signature(fn)
    package = sys.modules[_PACKAGE]

    @functools.wraps(fn)
    def hooked(*args, **kwargs):
        p = package._plugin
        rec = None if p is None else p._recorder
        out = fn(*args, **kwargs)
        if rec is not None:
            rec.guard(record, rec, sig.bind(*args, **kwargs).arguments, out)
        return out

    hooked._decoder_shell_hook = name
    return hooked


#: (module, name, original, wrapper) for every hooked global, filled by install_hooks().
SWAPS: list[tuple] = []


def install_hooks() -> list[str]:
    """Check and wrap the mHC globals of vLLM's DeepSeek-V4 modules (not bound yet); returns
    'module.name' for each one."""
    import vllm.models.deepseek_v4.nvidia.model as model
    import vllm.models.deepseek_v4.nvidia.mtp as mtp
    if SWAPS:
        return [f"{m.__name__}.{n}" for m, n, _, _ in SWAPS]
    found = []
    for module_name, names in HOOKS.items():
        module = {MODEL: model, MTP: mtp}[module_name]
        for name in names:
            fn = getattr(module, name, None)
            if not callable(fn):
                raise LookupError(f"{module_name} has no function {name}")
            found.append((module, name, fn, wrap(name, fn)))
    SWAPS.extend(found)
    return [f"{m.__name__}.{n}" for m, n, _, _ in SWAPS]


class bound:
    """While entered, the wrappers stand in for vLLM's mHC functions; on exit the originals return."""

    def __enter__(self):
        for module, name, _, hooked in SWAPS:
            setattr(module, name, hooked)
        return self

    def __exit__(self, *exc):
        for module, name, original, _ in SWAPS:
            setattr(module, name, original)
        return False
