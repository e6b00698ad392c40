"""The cuda driver: cuda-python driver API only (no torch in the replay path), NVRTC kernels,
fixed-address buffers, graphs built node by node, its own all-reduce (DESIGN.md 6).

Ranks are emulated on one device, or run one process per rank (drivers/cuda/processes.py);
placement "auto" picks processes when the host has a GPU for every rank.
"""

from __future__ import annotations

from ...errors import DriverUnavailable, UsageError
from .. import PLACEMENTS
from ...geometry import DENSE_OPS, MOE_OPS
from ..base import Driver, refuse_moe, require_support
from . import api
from .session import CudaSession
from .variants import describe

#: How a session runs the cycle: a graph of kernel nodes, or one persistent cooperative kernel; auto:
#: the cluster cycle where it was measured faster than the graph (cluster_cycle.auto_fits), else the graph.
CYCLES = ("graph", "auto", "persistent", "persistent-flags", "persistent-cluster")
PERSISTENT_VARIANTS = {
    "persistent": "the whole cycle as one resident cooperative kernel (mHC boundaries with their all-reduce folded "
                  "in, separated by grid barriers on a 64-bit counter; next weights prefetched into L2; emulated "
                  "ranks; select every command: --candidate cycle=persistent)",
    "persistent-flags": "the persistent kernel with its steps ordered by 64-bit (rank, row) counters instead of grid "
                        "barriers: a unit waits only for the units that made its row (select every command)",
    "persistent-fma": "the persistent kernel built with FMA contraction (deliberately inexact)",
    "persistent-cluster": "the whole cycle as one resident kernel of 16-block clusters, one per (rank, row group): "
                          "stream values kept in shared memory, partials exchanged through distributed shared "
                          "memory, clusters joined only at the all-reduces (emulated ranks, sm_90+, hidden 1024/"
                          "2048/4096; select every command)",
}


def persistent_form(cycle, variants, default: str) -> str:
    """'persistent' / 'persistent-fma' when the whole cycle is to run as one kernel, else ''.
    The persistent kernel replaces every command at once, so it is all commands or none."""
    named = {i for i, v in (variants or {}).items() if isinstance(v, str) and v in PERSISTENT_VARIANTS}
    if not named:
        return default if default in PERSISTENT_VARIANTS and not variants else ""
    forms = {variants[i] for i in named}
    if len(named) != len(cycle.commands) or len(forms) > 1:
        raise UsageError("the persistent cycle replaces every command at once: select the whole cycle "
                         "(--candidate cycle=persistent)")
    return forms.pop()


class CudaDriver(Driver):
    name = "cuda"

    def __init__(self, device: int = 0, placement: str = "auto", pdl: bool = True, cycle: str = "graph"):
        if placement not in PLACEMENTS:
            raise UsageError(f"unknown placement {placement!r}; choose one of {', '.join(PLACEMENTS)}")
        if cycle not in CYCLES:
            raise UsageError(f"unknown cycle form {cycle!r}; choose one of {', '.join(CYCLES)}")
        self.cycle_form = cycle
        raw = api.load()
        self.cu = api.Checked(raw)
        n = self.cu.cuDeviceGetCount()
        if not 0 <= device < n:
            raise DriverUnavailable(f"cuda driver unavailable: no device {device} ({n} present)")
        self.device_count = n
        self.device_index = device
        self.placement, self.pdl = placement, pdl
        self.device = self.cu.cuDeviceGet(device)
        attr = raw.CUdevice_attribute
        major = self.cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device)
        minor = self.cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device)
        self.sm = 10 * major + minor  # compute capability as one number (90 on an H200)
        self.arch = f"sm_{major}{minor}"
        name = self.cu.cuDeviceGetName(128, self.device)
        self.gpu = (name.decode() if isinstance(name, bytes) else str(name)).split("\x00")[0].strip()
        self.ctx = self.cu.cuDevicePrimaryCtxRetain(self.device)
        self.cu.cuCtxSetCurrent(self.ctx)
        self._last = "emulated"

    def placement_for(self, ranks: int) -> str:
        if self.placement != "auto":
            return self.placement
        return "processes" if ranks > 1 and self.device_count >= ranks else "emulated"

    def load(self, cycle, variants=None):
        require_support(cycle, "cuda", fused_norm=True,
                        ops=("allreduce", "mhc_pre", "mhc_post_pre", "mhc_post_head", *MOE_OPS, *DENSE_OPS))
        if self.cycle_form == "auto" and not variants:
            session = self._load_auto(cycle)
            if session is not None:
                return session
        form = persistent_form(cycle, variants, self.cycle_form)
        if form and cycle.geometry.fused_norm:
            raise DriverUnavailable("the persistent cycle form has no fused RMSNorm node; replay a fused_norm "
                                    "corpus with --cycle graph")
        if form:
            refuse_moe(cycle, f"cuda ({form} cycle)")  # the MoE commands are graph nodes only
            return self._load_persistent(cycle, form)
        self._last = self.placement_for(cycle.ranks)
        if self._last == "processes":
            from .processes import ProcessSession
            devices = [(self.device_index + r) % self.device_count for r in range(cycle.ranks)]
            self._devices = devices
            return ProcessSession(devices, cycle, variants, pdl=self.pdl)
        self.cu.cuCtxSetCurrent(self.ctx)
        return CudaSession(self, cycle, variants, pdl=self.pdl)

    def _load_auto(self, cycle):
        """The cluster cycle where it is faster than the graph path (see cluster_cycle.AUTO_MAX_ROWS), else
        None (the graph). A gate's candidates and its reference never come here: they name their form."""
        from .cluster_cycle import ClusterSession, auto_fits
        if not auto_fits(self.sm, self.placement_for(cycle.ranks), cycle):
            return None
        self.cu.cuCtxSetCurrent(self.ctx)
        session = ClusterSession(self, cycle)
        self._last = "persistent-cluster"
        return session

    def _load_persistent(self, cycle, form: str):
        if form == "persistent-cluster":
            if self.placement == "processes":
                raise UsageError("the persistent-cluster cycle emulates every rank on one device (--placement emulated)")
            from .cluster_cycle import ClusterSession
            self._last = "persistent-cluster"
            self.cu.cuCtxSetCurrent(self.ctx)
            return ClusterSession(self, cycle)
        if self.placement_for(cycle.ranks) == "processes":  # one persistent kernel per rank process
            from .processes import ProcessSession
            self._last = "processes"
            self._devices = [(self.device_index + r) % self.device_count for r in range(cycle.ranks)]
            return ProcessSession(self._devices, cycle, {c.index: form for c in cycle.commands}, pdl=self.pdl)
        from .persistent import PersistentSession
        self._last = "persistent"
        self.cu.cuCtxSetCurrent(self.ctx)
        return PersistentSession(self, cycle, fma=form == "persistent-fma", flags=form == "persistent-flags")

    def available_variants(self) -> dict:
        return {**describe(), **PERSISTENT_VARIANTS}

    def versions(self) -> dict:
        """GPU, driver API, NVRTC and cuda-python versions (for the provenance of results)."""
        from importlib import metadata
        v = self.cu.cuDriverGetVersion()
        out = {"gpu": self.gpu, "arch": self.arch, "cuda_driver_api": f"{v // 1000}.{v % 1000 // 10}"}
        try:
            from cuda.bindings import nvrtc
            err, major, minor = nvrtc.nvrtcVersion()
            out["nvrtc"] = f"{major}.{minor}"
        except Exception:  # noqa: BLE001 - a version we cannot read is left out, not guessed
            pass
        for dist in ("cuda-python", "cuda-bindings"):
            try:
                out[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                pass
        return out

    def describe(self) -> str:
        if self._last == "processes":
            used = sorted(set(self._devices))
            shared = " (ranks share devices)" if len(used) < len(self._devices) else ""
            return f"cuda ({self.gpu}, {self.arch}, one process per rank on devices {used}{shared})"
        if self._last == "persistent-cluster":
            return f"cuda ({self.gpu}, {self.arch}, emulated ranks on one device, cluster cycle kernel)"
        if self._last == "persistent":
            return f"cuda ({self.gpu}, {self.arch}, emulated ranks on one device, persistent cycle kernel)"
        return f"cuda ({self.gpu}, {self.arch}, emulated ranks on one device)"


__all__ = ["CudaDriver", "CYCLES", "PLACEMENTS"]
