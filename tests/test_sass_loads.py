"""tools/sass_loads.py on real SASS (NVRTC for sm_90 and nvdisasm, no GPU): a load whose value the next
instructions read is listed with its reader and its distance; a read further away than --within is not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))


def _code(src: str, tmp_path, monkeypatch):
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is the cuda extra")
    from decoder_shell.drivers.cuda.nvrtc import EXACT_FLAGS, compile_cubin, disassemble, sass_instructions
    from decoder_shell.errors import DriverUnavailable
    monkeypatch.setenv("DECODER_SHELL_CACHE", str(tmp_path))
    try:
        return sass_instructions(disassemble(compile_cubin(src, "sm_90", EXACT_FLAGS)))
    except DriverUnavailable as e:
        pytest.fail(str(e))


def test_a_load_used_at_once_is_listed_with_its_reader(tmp_path, monkeypatch):
    from sass_loads import early_uses
    code = _code('extern "C" __global__ void k(const float* a, float* o) '
                 '{ o[threadIdx.x] = __fadd_rn(a[threadIdx.x], 1.0f); }', tmp_path, monkeypatch)
    rows = early_uses(code, 24)
    assert len(rows) == 1 and rows[0][1].split()[0].startswith("LDG"), rows
    assert "FADD" in rows[0][3], rows


def test_a_read_further_away_than_within_is_not_listed(tmp_path, monkeypatch):
    from sass_loads import early_uses
    code = _code('extern "C" __global__ void k(const float* a, float* o) '
                 '{ o[threadIdx.x] = __fadd_rn(a[threadIdx.x], 1.0f); }', tmp_path, monkeypatch)
    dist = early_uses(code, 24)[0][2]
    assert dist >= 1 and len(early_uses(code, dist)) == 1 and early_uses(code, dist - 1) == []
