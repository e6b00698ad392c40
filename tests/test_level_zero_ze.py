"""The Level Zero ctypes layer, native SYCL handles and the SPIR-V build, checked against the real
headers, loader and runtimes installed here. GPU-only checks skip with a reason where no Level
Zero GPU exists."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from decoder_shell.drivers.level_zero import spirv, ze
from decoder_shell.errors import DriverUnavailable

HEADER = Path("/usr/include/level_zero/ze_api.h")


def needs(ok: bool, why: str):
    """Skip without the prerequisite, except under CI, where it must be installed."""
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"CI lacks {why}")
        pytest.skip(f"needs {why}")


def c_layouts(tmp_path: Path) -> dict[str, int]:
    """sizeof and offsetof of every bound struct and field, as the C compiler sees ze_api.h."""
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <level_zero/ze_api.h>", "int main(void) {"]
    for cname, cls in ze.STRUCTS.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof({cname}));')
        for field, _ in cls._fields_:
            cfield = next((c for (s, c), p in ze.FIELD_ALIASES.items() if s == cname and p == field), field)
            lines.append(f'printf("{cname}.{field} %zu\\n", offsetof({cname}, {cfield}));')
    lines += ["return 0;", "}"]
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text("\n".join(lines))
    subprocess.run(["cc", str(src), "-o", str(exe)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def test_struct_layouts_match_headers(tmp_path):
    needs(HEADER.is_file() and shutil.which("cc") is not None, "libze-dev headers and a C compiler")
    want = c_layouts(tmp_path)
    got = {}
    for cname, cls in ze.STRUCTS.items():
        got[cname] = ctypes.sizeof(cls)
        for field, _ in cls._fields_:
            got[f"{cname}.{field}"] = getattr(cls, field).offset
    assert got == want
    assert len(want) > 60  # every struct and field was compared


def test_no_gpu_driver_is_one_line_error():
    needs(_loader_present(), "the Level Zero loader (libze1)")
    try:
        ze.require_driver()
    except DriverUnavailable as e:
        assert "\n" not in str(e) and "Level Zero" in str(e)
        assert e.exit_code == 3
    else:
        pytest.skip("a Level Zero GPU is present on this machine")


def test_missing_loader_is_one_line_error():
    with pytest.raises(DriverUnavailable, match="libze_loader_missing.so.1 not found"):
        ze.Loader("libze_loader_missing.so.1")


def test_loader_calls_are_checked():
    """A failing call raises ZeError naming the call and the result code."""
    needs(_loader_present(), "the Level Zero loader (libze1)")
    loader = ze.Loader()
    with pytest.raises(ze.ZeError, match=r"zeContextCreate returned ZE_RESULT_ERROR_\w+"):
        loader.zeContextCreate(None, None, ctypes.byref(ctypes.c_void_p()))


def _loader_present() -> bool:
    try:
        ctypes.CDLL(ze.LOADER)
        return True
    except OSError:
        return False


def test_spirv_kernels_have_contraction_off_and_are_cached(tmp_path):
    """Every kernel entry point of the module carries ExecutionMode ContractionOff (no FMA), and a
    second build is served from the cache by content hash."""
    try:
        clang, translator = spirv.find_toolchain()
    except DriverUnavailable as e:
        needs(False, str(e))
    il = spirv.build(1, cache=tmp_path)
    assert len(list(tmp_path.glob("*.spv"))) == 1
    assert spirv.build(1, cache=tmp_path) == il
    spirv.build(4, cache=tmp_path)  # another lane split is another module
    assert len(list(tmp_path.glob("*.spv"))) == 2
    (tmp_path / "k.spv").write_bytes(il)
    subprocess.run([translator, "-to-text", str(tmp_path / "k.spv"), "-o", str(tmp_path / "k.txt")], check=True)
    text = (tmp_path / "k.txt").read_text().splitlines()
    entries = {ln.split()[3] for ln in text if " EntryPoint " in ln}
    contraction_off = {ln.split()[2] for ln in text if " ExecutionMode " in ln and ln.split()[3] == "31"}
    assert len(entries) >= 13 and entries <= contraction_off


def test_native_handles_of_dpctl_objects():
    """sycl::context/device::getNative through ctypes yield the backend's own handles: on OpenCL
    the cl_context lists exactly the cl_device_id, whose name is the SYCL device's."""
    from decoder_shell.drivers.level_zero import runtime, sycl_native
    try:
        kind, dev = runtime.select_device("cpu")
    except DriverUnavailable as e:
        needs(False, str(e))
    import dpctl
    ctx = dpctl.SyclContext(dev)
    c, d = sycl_native.native_handle(ctx), sycl_native.native_handle(dev)
    cl = ctypes.CDLL("libOpenCL.so.1")
    cl.clGetContextInfo.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
    cl.clGetDeviceInfo.argtypes = cl.clGetContextInfo.argtypes
    devs = (ctypes.c_void_p * 1)()
    assert cl.clGetContextInfo(c, 0x1081, ctypes.sizeof(devs), devs, None) == 0  # CL_CONTEXT_DEVICES
    assert devs[0] == d
    name = ctypes.create_string_buffer(256)
    assert cl.clGetDeviceInfo(d, 0x102B, 256, name, None) == 0  # CL_DEVICE_NAME
    assert name.value.decode() == dev.name


def test_command_list_replay_on_gpu():
    """On a Level Zero GPU: graph epochs run the immutable command list and stay exact."""
    try:
        ze.require_driver()
    except DriverUnavailable as e:
        pytest.skip(f"no Level Zero GPU: {e}")
    from decoder_shell.corpus.store import Corpus
    from decoder_shell.drivers.level_zero import LevelZeroDriver
    from decoder_shell.replay.engine import replay
    root = Path(__file__).resolve().parents[1] / "corpus"
    res = replay(Corpus.open(root), LevelZeroDriver("gpu"), epochs=5, changed=2)
    assert res.exact and "Level Zero GPU" in res.driver


def test_moe_command_lists_exact_on_gpu():
    """On a Level Zero GPU: the MoE cycles (tiny-moe TP2, packed and expanded, dspark and mtp1) in the
    command lists give the cpu driver's bits on every output of every rank (tools/level_zero_moe_check.py)."""
    try:
        ze.require_driver()
    except DriverUnavailable as e:
        pytest.skip(f"no Level Zero GPU: {e}")
    import sys
    tool = Path(__file__).resolve().parents[1] / "tools" / "level_zero_moe_check.py"
    r = subprocess.run([sys.executable, str(tool), "--device", "gpu"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


def test_result_names_match_the_header():
    """Every ze_result_t value and name of ze_api.h, none invented or misnumbered."""
    import re
    needs(HEADER.is_file(), "libze-dev headers")
    text = HEADER.read_text()
    enum = text[text.index("typedef enum _ze_result_t"):text.index("} ze_result_t;")]
    want = {int(v, 0): n for n, v in re.findall(r"(ZE_RESULT_\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)", enum)
            if n != "ZE_RESULT_FORCE_UINT32"}
    assert ze.RESULT_NAMES == want
