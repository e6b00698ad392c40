"""The phase recorder: what runs while one armed phase executes, and only then.

Collectives are seen at the dispatcher (a TorchDispatchMode), so `torch.distributed.all_reduce`
(c10d::allreduce_), the functional collectives and ops that engines register (vllm::all_reduce) are
all recorded, however the service reached them. mHC boundaries come from forward hooks on the
`transformers` DeepSeek-V4 hyper-connection modules (or modules that declare `_decoder_shell_mhc`),
or from explicit `record_mhc` calls. Entering registers both; leaving removes both, so a disarmed
service runs no capture code at all.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from .tensors import to_numpy

_SUM = 0  # c10d ReduceOp.RedOpType.SUM
_TRANSFORMERS = "transformers.models.deepseek_v4.modeling_deepseek_v4"


@dataclass
class Event:
    kind: str  # "collective" | "hc" | "head"
    tensors: dict  # name -> numpy array (flattened to rows)
    source: str = ""


def mhc_kind(module) -> str | None:
    """'hc' for a hyper-connection (pre-mix) module, 'head' for the head collapse, else None."""
    declared = getattr(module, "_decoder_shell_mhc", None)
    if declared:
        return declared
    m = sys.modules.get(_TRANSFORMERS)
    if m is None:
        return None
    if isinstance(module, m.DeepseekV4HyperConnection):
        return "hc"
    if isinstance(module, m.DeepseekV4HyperHead):
        return "head"
    return None


@dataclass(frozen=True)
class TpGroup:
    """The service's tensor-parallel group, by name: only its all-reduces belong to the cycle.

    `vllm` is the GroupCoordinator's unique name (the group_name argument of vllm::all_reduce),
    `c10d` the torch.distributed group name of its device group. None accepts any group of R ranks."""

    vllm: str | None = None
    c10d: str | None = None


class PhaseRecorder:
    """Records one phase's collectives and mHC boundaries, in execution order.

    A phase ends at its head collapse: what runs after it in the same phase (vLLM's k-1 one-row
    MTP passes after the first draft pass) is not part of the cycle and is noted as skipped."""

    def __init__(self, phase: str, ranks: int, group: TpGroup | None = None):
        self.phase = phase
        self.ranks = ranks
        self.group = group or TpGroup()
        self.events: list[Event] = []
        self.skipped: list[str] = []
        self.errors: list[str] = []
        self.closed = False
        self._mode = None
        self._hook = None

    def __enter__(self):
        self._mode = _CollectiveMode(self)
        self._mode.__enter__()
        self._hook = torch.nn.modules.module.register_module_forward_hook(self._forward_hook, with_kwargs=True)
        return self

    def __exit__(self, *exc):
        try:
            self._hook.remove()
        finally:
            self._mode.__exit__(*exc)
        return False

    def guard(self, fn, *args, **kwargs):
        """Run a recording step; a failure is kept for the capture report, never raised into the service."""
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            self.errors.append(f"{type(e).__name__}: {e}")
            return None

    # --- mHC ---------------------------------------------------------------------------------
    def _forward_hook(self, module, args, kwargs, output):
        kind = mhc_kind(module)
        if kind is not None:
            self.guard(self._record_module, kind, module, args, kwargs, output)
        return None

    def _record_module(self, kind, module, args, kwargs, output):
        streams = args[0] if args else next(iter(kwargs.values()))
        if kind == "hc":
            post, comb, y = output
            self.record_mhc("hc", streams, module.fn, module.base, module.scale, y, post, comb,
                            source=type(module).__name__)
        else:
            self.record_mhc("head", streams, module.hc_fn, module.hc_base, module.hc_scale, output,
                            source=type(module).__name__)

    def record_mhc(self, kind, streams, fn, base, scale, y, post=None, comb=None, source="record_mhc",
                   norm_weight=None, x=None):
        """An mHC step. `norm_weight`: the RMSNorm weight a fused hc_pre applied to y; `x`: the
        sub-block output an hc_post consumed (checked against the all-reduce that produced it)."""
        if self._closed(f"{source} after the head collapse"):
            return
        hc, d = streams.shape[-2], streams.shape[-1]
        t = {"streams": to_numpy(streams).reshape(-1, hc, d), "fn": to_numpy(fn), "base": to_numpy(base),
             "scale": to_numpy(scale).reshape(-1), "y": to_numpy(y).reshape(-1, d)}
        if kind == "hc":
            t["post"] = to_numpy(post).reshape(-1, hc)
            t["comb"] = to_numpy(comb).reshape(-1, hc, hc)
        elif kind != "head":
            raise ValueError(f"record_mhc kind must be 'hc' or 'head', not {kind!r}")
        if norm_weight is not None:
            t["norm_weight"] = to_numpy(norm_weight).reshape(d)
        if x is not None:
            t["x"] = to_numpy(x).reshape(-1, d)
        self.events.append(Event(kind, t, source))
        self.closed = kind == "head"

    def _closed(self, what: str) -> bool:
        if self.closed:
            self.skipped.append(what)
        return self.closed

    # --- collectives -------------------------------------------------------------------------
    def record_collective(self, x, out, source):
        if self._closed(f"{source} after the head collapse"):
            return
        d = x.shape[-1]
        self.events.append(Event("collective", {"x": x.reshape(-1, d), "out": out.reshape(-1, d)}, source))


class _CollectiveMode(TorchDispatchMode):
    """Intercepts all-reduce ops at the dispatcher; every other op passes straight through."""

    def __init__(self, recorder: PhaseRecorder):
        super().__init__()
        self.rec = recorder
        self.handlers = _handlers()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = self.handlers.get(func)
        if handler is None:
            return func(*args, **kwargs)
        return handler(self.rec, func, args, kwargs)


def _handlers() -> dict:
    h = {torch.ops.c10d.allreduce_.default: _c10d_allreduce}
    fc = getattr(torch.ops, "_c10d_functional", None)
    if fc is not None:
        h[fc.all_reduce.default] = _functional_all_reduce
        h[fc.all_reduce_.default] = _functional_all_reduce
    try:
        h[torch.ops.vllm.all_reduce.default] = _outplace_all_reduce
    except (AttributeError, RuntimeError):
        pass
    return h


def _c10d_allreduce(rec, func, args, kwargs):
    tensors, pg, op = args[0], args[1], args[2]
    group = dist.ProcessGroup.unbox(pg)
    size = group.size()
    if rec.group.c10d is not None and group.group_name != rec.group.c10d:
        rec.skipped.append(f"c10d::allreduce_ on group {group.group_name} (not the TP group)")
        return func(*args, **kwargs)
    if len(tensors) != 1 or size != rec.ranks or op.op() != _SUM:
        rec.skipped.append(f"c10d::allreduce_ over {size} ranks, op {op.op()}, {len(tensors)} tensors")
        return func(*args, **kwargs)
    x = rec.guard(to_numpy, tensors[0])
    out = func(*args, **kwargs)
    if x is not None:
        out[1].wait()
        rec.guard(lambda: rec.record_collective(x, to_numpy(tensors[0]), "c10d::allreduce_"))
    return out


def _functional_all_reduce(rec, func, args, kwargs):
    t, op, group = args[0], args[1], args[2]
    size = _group_size(group)
    if rec.group.c10d is not None and group != rec.group.c10d:
        rec.skipped.append(f"{func.name()} on group {group} (not the TP group)")
        return func(*args, **kwargs)
    if op.lower() != "sum" or (size is not None and size != rec.ranks):
        rec.skipped.append(f"{func.name()} over {size} ranks, op {op}")
        return func(*args, **kwargs)
    x = rec.guard(to_numpy, t)
    out = func(*args, **kwargs)
    if x is not None:
        waited = torch.ops._c10d_functional.wait_tensor.default(out)
        rec.guard(lambda: rec.record_collective(x, to_numpy(waited), func.name()))
    return out


def _outplace_all_reduce(rec, func, args, kwargs):
    """vllm::all_reduce(tensor, group_name): only the TP group's reductions are the cycle's."""
    name = kwargs.get("group_name", args[1] if len(args) > 1 else None)
    if rec.group.vllm is not None and name != rec.group.vllm:
        rec.skipped.append(f"{func.name()} on group {name} (not the TP group {rec.group.vllm})")
        return func(*args, **kwargs)
    x = rec.guard(to_numpy, args[0])
    out = func(*args, **kwargs)
    if x is not None:
        rec.guard(lambda: rec.record_collective(x, to_numpy(out), func.name()))
    return out


def _group_size(group_name) -> int | None:
    try:
        from torch.distributed.distributed_c10d import _resolve_process_group
        return _resolve_process_group(group_name).size()
    except Exception:  # an engine's own group registry: trust the op
        return None
