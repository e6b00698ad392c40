"""Capture from a live service (DESIGN.md 8).

In every rank process of the service, one line installs the plugin:

    from decoder_shell import capture
    capture.install()                      # rank/world from torch.distributed or RANK/WORLD_SIZE

and the engine marks its cycles and phases (free while disarmed):

    with capture.cycle():
        with capture.phase("draft"):  ...
        with capture.phase("verify"): ...

Collectives and `transformers` DeepSeek-V4 mHC modules are then recorded automatically while armed;
other mHC code can call `capture.record_mhc(...)`. This module imports nothing heavy until install().
"""

from __future__ import annotations

import contextlib

_NULL = contextlib.nullcontext()
_plugin = None


def install(*, rank: int | None = None, world: int | None = None, run_dir=None, token_file=None,
            control_port: int | None = 0, geometry=None, service: dict | None = None):
    """Install the plugin in this rank process (idempotent); see capture.install_plugin."""
    global _plugin
    if _plugin is None:
        from .install import install_plugin
        _plugin = install_plugin(rank=rank, world=world, run_dir=run_dir, token_file=token_file,
                                 control_port=control_port, geometry=geometry, service=service)
    return _plugin


def installed():
    """The plugin of this process, or None."""
    return _plugin


def cycle():
    p = _plugin
    return _NULL if p is None else p.cycle()


def phase(name: str):
    p = _plugin
    return _NULL if p is None else p.phase(name)


def record_mhc(kind: str, streams, fn, base, scale, y, post=None, comb=None, norm_weight=None, x=None) -> None:
    """Record an mHC step by hand: kind "hc" (pre-mix: post, comb, collapsed y) or "head";
    norm_weight when y is RMSNorm'd (fused_norm), x the sub-block output an hc_post consumed."""
    p = _plugin
    if p is not None:
        p.record_mhc(kind, streams, fn, base, scale, y, post, comb, norm_weight=norm_weight, x=x)


__all__ = ["install", "installed", "cycle", "phase", "record_mhc"]
