"""CUDA kernels build on any machine: NVRTC (cuda-python + the NVRTC wheel, the `cuda` extra) compiles
every source and every kernel instance the driver can ask for, for sm_90, without a GPU. A compile
error is a failure here (BuildError, exit 4), never a skip; and a session whose build fails frees
everything it made (counted on a ledger of the driver API calls, since no GPU runs here)."""

from __future__ import annotations

import itertools

import pytest

from decoder_shell.commands.program import build_cycle
from decoder_shell.contracts.allreduce import RingContract
from decoder_shell.drivers.cuda import kernels as K
from decoder_shell.drivers.cuda import nvrtc as N
from decoder_shell.drivers.cuda.variants import VARIANTS, Node, Target
from decoder_shell.errors import BuildError
from decoder_shell.geometry import Geometry
from decoder_shell.replay.candidates import KernelCandidate


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path / "cache"))


def _every_spec(fma: bool = False) -> list[K.KernelSpec]:
    """mHC instances the variants ask for, over hidden sizes and row counts (fast path or not): every
    template argument value of every op, and every kind of instance (cluster, cluster-pre, fused), in at
    least one instance (all 200-odd of them would take minutes to compile on two cores)."""
    specs, seen = {}, set()
    for hidden, (vr, dr) in itertools.product((1024, 1536, 2048, 4096, 8192), ((1, 0), (2, 1), (4, 3), (8, 7))):
        cyc = build_cycle(Geometry(preset="random", hidden=hidden, layers=1, ranks=2, verify_rows=vr,
                                   draft_rows=dr), RingContract())
        for cmd, var, sm in itertools.product(cyc.commands, VARIANTS.values(), (80, 90)):
            if cmd.op != "allreduce" and var.target is not Target.ALLREDUCE and var.node is Node.OWN \
                    and var.fma == fma:
                sp = K.spec_for(cyc, cmd, var, sm)
                new = {(sp.op, "opg", sp.opg), ("q", sp.q), ("rows", sp.rows_per_block)}
                new |= {(sp.op, sp.cluster, sp.clpre, sp.fused, sp.rows_per_block > 1)}
                if new - seen:
                    seen |= new
                    specs[sp.entry] = sp
    return list(specs.values())


@pytest.mark.parametrize("flags", [N.EXACT_FLAGS, N.FMA_FLAGS], ids=["exact", "fma"])
def test_every_kind_of_kernel_instance_compiles_for_sm90(flags):
    specs = _every_spec(fma=flags is N.FMA_FLAGS)
    assert len(specs) >= 3
    src = K.SOURCE + "".join(sp.wrapper() for sp in specs)
    cubin = N.compile_cubin(src, "sm_90", flags)
    assert cubin[:4] == b"\x7fELF"
    for name in [*K.ENTRIES, *(sp.entry for sp in specs)]:
        assert name.encode() in cubin, name


def test_a_compile_error_is_a_build_error_that_names_the_status_and_the_line(monkeypatch):
    nvrtc, _ = N.bindings()
    made, destroyed = [], []
    create, destroy = nvrtc.nvrtcCreateProgram, nvrtc.nvrtcDestroyProgram
    monkeypatch.setattr(nvrtc, "nvrtcCreateProgram", lambda *a: (lambda r: (made.append(r[1]), r)[1])(create(*a)))
    monkeypatch.setattr(nvrtc, "nvrtcDestroyProgram", lambda p: (destroyed.append(p), destroy(p))[1])
    src = K.SOURCE + 'extern "C" __global__ void planted(float *p) { p[0] = undefined_name; }\n'
    with pytest.raises(BuildError) as err:
        N.compile_cubin(src, "sm_90")
    msg = str(err.value)
    assert err.value.exit_code == 4 and "\n" not in msg
    assert "NVRTC_ERROR_COMPILATION" in msg and "undefined_name" in msg and "nvrtcResult" not in msg
    assert len(made) == 1 and destroyed == made
    assert not list((N.cache_dir()).glob("*.cubin"))  # nothing cached from a failed build


class Ledger:
    """The driver API calls a session makes while it is built, as a ledger of what is live: every
    create/alloc/load opens an entry, its destroy/free/unload must close exactly that entry."""

    OPEN = {"cuStreamCreate": "stream", "cuMemAlloc": "mem", "cuModuleLoadData": "module",
            "cuGraphCreate": "graph", "cuEventCreate": "event", "cuGraphInstantiate": "exec",
            "cuIpcOpenMemHandle": "ipc"}
    CLOSE = {"cuStreamDestroy": "stream", "cuMemFree": "mem", "cuModuleUnload": "module",
             "cuGraphDestroy": "graph", "cuEventDestroy": "event", "cuGraphExecDestroy": "exec",
             "cuIpcCloseMemHandle": "ipc"}
    QUIET = ("cuMemsetD8", "stream_done", "cuModuleGetFunction", "cuMemcpyHtoD")

    def __init__(self, images: list):
        self.live: dict[int, str] = {}
        self.next = itertools.count(0x1000, 0x100)
        self.images = images

    def __getattr__(self, name):
        def call(*args):
            if name in self.OPEN:
                h = next(self.next)
                self.live[h] = self.OPEN[name]
                if name == "cuModuleLoadData":
                    self.images.append(args[0])
                return h
            if name in self.CLOSE:
                assert self.live.pop(int(args[0])) == self.CLOSE[name], name
                return None
            assert name in self.QUIET, f"unexpected call {name}"
            return 1
        return call


class _Drv:
    def __init__(self, cu):
        self.cu, self.arch, self.sm = cu, "sm_90", 90


def test_a_session_whose_kernel_does_not_compile_frees_everything_it_made():
    """The driver's own module builds and loads, then a user kernel with a planted error fails to
    compile: the stream, every arena and the loaded module must be released before the error leaves."""
    from decoder_shell.drivers.cuda.session import CudaSession
    cyc = build_cycle(Geometry(preset="random", hidden=2048, layers=1, ranks=2, verify_rows=2, draft_rows=0),
                      RingContract())
    mhc = next(c for c in cyc.commands if c.op != "allreduce")
    ar = next(c for c in cyc.commands if c.op == "allreduce")
    cand = KernelCandidate(name="planted", spec="planted.json", code_path="planted.cu", kind="source",
                           language="cuda", entry="k", grid=(1, 1, 1), block=(32, 1, 1), shared_bytes=0, args=(),
                           code=b'extern "C" __global__ void k() { undefined_name(); }\n')
    images: list = []
    ledger = Ledger(images)
    with pytest.raises(BuildError) as err:
        CudaSession(_Drv(ledger), cyc, {mhc.index: cand, ar.index: "copy"})
    assert "planted.cu" in str(err.value) and "undefined_name" in str(err.value)
    assert len(images) == 1 and images[0][:4] == b"\x7fELF"  # the driver's own module was loaded first
    assert ledger.live == {}


def test_a_build_never_writes_into_the_interpreters_shared_bytes():
    """NVRTC writes its log and cubin into the buffers it is given; `b" " * size` at size 1 (an empty
    log) is the interpreter's one shared b" " object, and writing into it turned every space of the
    process into a NUL (seen on a GPU run: torch's schema parser then failed on "str\\0tag"). A build
    with a one-byte log must leave b" " and its neighbours intact."""
    space, zero = bytes([32]), bytes([0])
    nvrtc, _ = N.bindings()
    src = 'extern "C" __global__ void quiet(float *p) { p[0] = 1.0f; }\n'
    prog = nvrtc.nvrtcCreateProgram(src.encode(), b"quiet.cu", 0, [], [])[1]
    assert int(nvrtc.nvrtcCompileProgram(prog, 1, [b"--gpu-architecture=sm_90"])[0]) == 0
    assert nvrtc.nvrtcGetProgramLogSize(prog)[1] == 1  # the case that corrupted b" "
    nvrtc.nvrtcDestroyProgram(prog)
    cubin = N.compile_cubin(src, "sm_90")
    assert cubin[:4] == b"\x7fELF"
    assert b" " == space and bytes([32]) == b" " and b" "[0] == 32 and zero == b"\x00"


def test_the_sweep_puts_every_mhc_variant_on_commands_the_driver_accepts():
    """replay.selfcheck's sweep (tools/cuda_check.py runs it first) covers every mHC implementation the
    cuda driver builds (all but the deliberately inexact fma), each fused-mN on a phase of N rows, and
    every choice it makes passes the driver's own checks (variants.resolve) on an sm_90 device."""
    from decoder_shell.drivers.cuda.variants import resolve
    from decoder_shell.replay.selfcheck import MHC_VARIANTS, sweep_cases
    built = {n for n, v in VARIANTS.items() if v.target is Target.MHC and v.node is Node.OWN and not v.fma}
    assert set(MHC_VARIANTS) == built
    seen = set()
    for cyc, v in sweep_cases():
        resolve(cyc, v, rank=None, sm=90)  # raises UsageError on a choice the driver refuses
        for idx, name in v.items():
            seen.add(name)
            if VARIANTS[name].rows:
                assert cyc.geometry.phase(cyc.commands[idx].boundary.phase).rows == VARIANTS[name].rows
    assert seen == built

