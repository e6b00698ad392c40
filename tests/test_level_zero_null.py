"""The Level Zero path runs: ze_program's whole call sequence (context, module from the project's SPIR-V,
kernels with their arguments, events, command queue and list, execution, timestamps, IPC handles)
for a dense cycle and the tiny-moe MoE cycles, under the public loader's null driver with the
validation layer's parameter, handle-lifetime and leak checks, in a process of its own. Every call
must succeed and validate and every handle be destroyed; outputs are not computed (the null driver
does nothing), so the MoE command lists are compared launch by launch with the SYCL path's, which
replays exactly. The loader is built once per environment by tools/level_zero_null.py (the README's test
command runs it); under CI a missing build or toolchain is a failure, elsewhere a skip with the reason."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))
import level_zero_null  # noqa: E402
import ze_null_sequence  # noqa: E402

from decoder_shell.drivers.level_zero import plan as planning  # noqa: E402


def _needs(ok, why: str):
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"CI lacks {why}")
        pytest.skip(f"needs {why}")


@pytest.fixture(scope="module")
def sequence():
    """tests/ze_null_sequence.py run once under the null driver with the validation layer's parameter,
    handle-lifetime and leak checks: (its JSON summary, its stderr). The group size is the SYCL CPU
    device's where that runtime exists, so the MoE command lists can be compared with its launches."""
    try:
        libdir = level_zero_null.built()
    except FileNotFoundError as e:
        libdir, why = None, str(e)
    else:
        why = "the null-driver loader (python tools/level_zero_null.py)"
    _needs(libdir, why)
    _needs(shutil.which("clang-15") or shutil.which("clang"), "clang and llvm-spirv (the SPIR-V build)")
    group = _sycl_target().group if _sycl_target() else planning.group_size(256)
    env = {**os.environ, "ZE_ENABLE_NULL_DRIVER": "1", "ZE_ENABLE_VALIDATION_LAYER": "1",
           "ZE_ENABLE_PARAMETER_VALIDATION": "1", "ZE_ENABLE_HANDLE_LIFETIME": "1",
           "ZEL_ENABLE_BASIC_LEAK_CHECKER": "1",
           "LD_LIBRARY_PATH": f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "ze_null_sequence.py"), str(libdir), str(group)],
                       env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


_TARGET = []


def _sycl_target():
    """The level-zero driver's SYCL target on this machine (Intel's OpenCL CPU runtime), or None."""
    if not _TARGET:
        from decoder_shell.drivers.level_zero import LevelZeroDriver
        from decoder_shell.errors import DriverUnavailable
        try:
            _TARGET.append(LevelZeroDriver(device="cpu").target)
        except DriverUnavailable:
            _TARGET.append(None)
    return _TARGET[0]


def test_ze_call_sequence_validates_under_the_null_driver(sequence):
    got, stderr = sequence
    assert got["refused_null_pointer"] == "ZE_RESULT_ERROR_INVALID_NULL_POINTER"  # parameter checks were on
    assert got["launches"] > 0 and got["epochs"] == 3 and got["ranks_timed"] == 2
    assert "allreduce" in " ".join(got["kernels"]) and any(k.startswith("mhc_") for k in got["kernels"])
    assert got["spirv_bytes"] > 0 and got["ipc_handle_bytes"] == 64
    assert got["ipc_open"] == "Level Zero zeMemOpenIpcHandle returned success but no address"
    _every_handle_destroyed(stderr)


def _every_handle_destroyed(stderr: str):
    """The leak checker's create/destroy table was printed (so it was on) and shows no leak."""
    assert "Check balance of create/destroy calls" in stderr, stderr[-2000:]
    assert "LEAK" not in stderr, stderr[-3000:]
    counts = dict(re.findall(r"(ze\w+) = (\d+)", stderr))
    assert int(counts["zeKernelCreate"]) > 0 and counts["zeKernelCreate"] == counts["zeKernelDestroy"]
    assert counts["zeMemAllocDevice"] == counts["zeMemFree"] and counts["zeEventCreate"] == counts["zeEventDestroy"]


def test_moe_cycles_run_in_level_zero_command_lists(sequence):
    """Every tiny-moe TP2 cycle (packed and expanded weights, dspark and mtp1 drafts, official and fused
    combine): each MoE command
    is in the command list, all of it validates, 3 epochs run, and every handle is destroyed."""
    got, stderr = sequence
    assert sorted(got["moe"]) == sorted("-".join(c) for c in ze_null_sequence.MOE_CASES) and len(got["moe"]) == 8
    for case, m in got["moe"].items():
        combine = "moe_combine_official" if case.endswith("official") else "moe_combine"
        assert set(m["kernels"]) >= {"moe_qdq", "moe_gate", "moe_linear", combine}, case
        assert m["appended"] == m["launches"] and m["epochs"] == 3 and m["ranks_timed"] == 2, case
        assert m["arena_bytes"] > 0, case
        # the routed and shared commands stage h in the arena: both paths bind the same regions
        assert any(a[:2] == ["ptr", "arena"] for b in m["bindings"] if b["kernel"] == "moe_linear"
                   for a in b["args"]), case
    stages = {c: sum(b["kernel"] == "moe_gate" for b in m["bindings"]) for c, m in got["moe"].items()}
    assert stages == {c: 6 if "dspark" in c else 2 for c in got["moe"]}  # stages x 2 ranks
    _every_handle_destroyed(stderr)


def _sycl_launches(cyc) -> list[dict]:
    """The SYCL path's launches of `cyc` in the form the Level Zero sequence records them: kernel, work
    sizes, and each argument as bytes (scalars) or (allocation, offset) (pointers)."""
    target = _sycl_target()
    _needs(target, "Intel's OpenCL CPU runtime (the SYCL path to compare with)")
    from decoder_shell.drivers.level_zero.sycl_session import SyclSession

    session = SyclSession(cyc, target)
    try:
        spaces = [*range(len(cyc.buffers)), planning.ARENA]
        allocations = {s: (session.allocation(s)._pointer, session.allocation(s).nbytes) for s in spaces}

        def arg(a):
            if isinstance(a, ctypes._SimpleCData):
                return ["val", bytes(a).hex()]
            v = a._pointer
            space = next(s for s, (base, size) in allocations.items() if base <= v < base + size)
            return ["ptr", space, v - allocations[space][0]]
        return [{"kernel": k.get_function_name(), "global": g[0], "local": l[0], "args": [arg(a) for a in args]}
                for k, args, g, l in session.launches]
    finally:
        session.close()


@pytest.mark.parametrize("case", ["-".join(c) for c in ze_null_sequence.MOE_CASES])
def test_moe_command_list_binds_the_plan_the_sycl_path_runs(sequence, case):
    """The Level Zero command list of an MoE cycle launches the very kernels, work sizes and argument
    bytes that the SYCL path executes (and replays exactly: tests/test_moe_cycle.py): pointers as
    (allocation, offset), scalars as bytes, launch by launch. So the GPU path cannot drift from the
    checked one."""
    got, _ = sequence
    sycl = _sycl_launches(ze_null_sequence.moe_cycle(*case.split("-")))
    ze_side = got["moe"][case]["bindings"]
    combine = "moe_combine_official" if case.endswith("official") else "moe_combine"
    assert len(ze_side) == len(sycl) and any(b["kernel"] == combine for b in sycl)
    for i, (z, s) in enumerate(zip(ze_side, sycl)):
        assert z == s, f"launch {i}"


def test_dense_attention_cycles_run_in_level_zero_command_lists(sequence):
    """tiny-moe-attn TP2 cycles: the dense attention commands (moe_qdq and dense_linear launches) are in
    the command lists beside the MoE ones, all of it validates, 3 epochs run, every handle is destroyed."""
    got, stderr = sequence
    assert sorted(got["attn"]) == sorted("-".join(c) for c in ze_null_sequence.ATTN_CASES)
    for case, m in got["attn"].items():
        assert set(m["kernels"]) >= {"moe_qdq", "dense_linear", "moe_linear"}, case
        assert m["appended"] == m["launches"] and m["epochs"] == 3, case
        stages = 3 if "dspark" in case else 1
        assert sum(b["kernel"] == "dense_linear" for b in m["bindings"]) == 2 * (5 * stages + 1), case  # 5 projections a stage + main_proj, 2 ranks
    _every_handle_destroyed(stderr)


@pytest.mark.parametrize("case", ["-".join(c) for c in ze_null_sequence.ATTN_CASES])
def test_dense_command_list_binds_the_plan_the_sycl_path_runs(sequence, case):
    """The command list of a tiny-moe-attn cycle launches the kernels, work sizes and argument bytes the
    SYCL path executes (exactly: tests/test_dense_cycle.py), launch by launch."""
    got, _ = sequence
    sycl = _sycl_launches(ze_null_sequence.attn_cycle(*case.split("-")))
    ze_side = got["attn"][case]["bindings"]
    assert len(ze_side) == len(sycl) and any(b["kernel"] == "dense_linear" for b in sycl)
    for i, (z, s) in enumerate(zip(ze_side, sycl)):
        assert z == s, f"launch {i}"
