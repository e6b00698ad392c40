"""The vLLM 0.33 adapter against the real vLLM package on CPU (installed with --no-deps; skipped
without it): the entry point vLLM discovers, the hooks bound to DeepSeek-V4's real function names,
and a capture from a real gloo TP group driving vLLM's torch mHC references through those hooks."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (pip install --no-deps vllm==0.33.0)")

from decoder_shell.geometry import Geometry  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_TARGET_DEVICE": "cpu", "DECODER_SHELL_CAPTURE": "1"}


def _python(code: str, env=ENV) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_entry_point_is_discovered_and_binds_the_real_names():
    r = _python("""
import json
from vllm.plugins import load_general_plugins
import vllm.model_executor.kernels.mhc.tilelang as tl
load_general_plugins()
import vllm.models.deepseek_v4.nvidia.model as m, vllm.models.deepseek_v4.nvidia.mtp as t
from vllm.v1.worker.gpu_worker import Worker
from vllm.v1.worker.gpu.model_runner import GPUModelRunner as R
from decoder_shell import capture
from decoder_shell.capture.vllm_mhc import SWAPS, bound
out = {}
for mod, name, original, hooked in SWAPS:
    # wraps the real function; the global stays vLLM's own until an armed phase binds the wrapper
    out[mod.__name__ + "." + name] = (original is getattr(tl, name) is getattr(mod, name)
                                     and hooked.__wrapped__ is original)
with bound():
    out["bound"] = all(getattr(mod, name) is hooked for mod, name, _, hooked in SWAPS)
out["restored"] = all(getattr(mod, name) is original for mod, name, original, _ in SWAPS)
out["init_device"] = Worker.init_device._decoder_shell_hook
out["execute_model"] = R.execute_model._decoder_shell_hook
out["load_model"] = R.load_model._decoder_shell_hook
out["installed"] = capture.installed() is not None
print(json.dumps(out))
""")
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    model, mtp = "vllm.models.deepseek_v4.nvidia.model.", "vllm.models.deepseek_v4.nvidia.mtp."
    want = {model + n: True for n in ("mhc_pre_broadcast_tilelang", "mhc_pre_tilelang", "mhc_fused_post_pre_tilelang",
                                      "mhc_post_tilelang", "hc_head_fused_kernel_tilelang")}
    want.update({mtp + n: True for n in ("mhc_post_tilelang", "hc_head_fused_kernel_tilelang")})
    want.update(init_device="init_device", execute_model="execute_model", load_model="load_model", installed=False,
                bound=True, restored=True)
    assert got == want  # register() patched every call site and installed nothing


def test_disabled_without_the_switch_and_refused_on_another_version():
    """Without DECODER_SHELL_CAPTURE=1 the entry point does nothing; with it, on a vLLM other than 0.33,
    register() says so in one line and patches nothing (the service runs on)."""
    r = _python("""
import os
import vllm
from vllm.plugins import load_general_plugins
from decoder_shell.capture.vllm_mhc import SWAPS
from vllm.v1.worker.gpu_worker import Worker
load_general_plugins()
print(bool(SWAPS) or hasattr(Worker.init_device, "_decoder_shell_hook"))
os.environ["DECODER_SHELL_CAPTURE"] = "1"
vllm.__version__ = "0.34.1"
from decoder_shell.capture.vllm import register
register()
print(bool(SWAPS) or hasattr(Worker.init_device, "_decoder_shell_hook"))
""", env={k: v for k, v in ENV.items() if k != "DECODER_SHELL_CAPTURE"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-2:] == ["False", "False"]
    lines = [ln for ln in r.stderr.splitlines() if "decoder-shell" in ln]
    assert len(lines) == 1 and "vLLM 0.34.1 is not supported (expected vLLM 0.33.x)" in lines[0], lines


GEOMETRY = Geometry(preset="vllm", hidden=16, layers=1, ranks=2, verify_rows=3, draft_rows=3,
                    draft_kind="vllm-mtp", fused_norm=True)


@pytest.fixture(scope="module")
def vllm_capture(tmp_path_factory):
    import torch.multiprocessing as mp

    from tests.vllm_drive import rank_main
    base = tmp_path_factory.mktemp("vllm")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    out = str(base / "corpus")
    procs = [ctx.Process(target=rank_main, args=(r, 2, port, str(base / "run"), out, GEOMETRY.to_json(), 4, queue))
             for r in range(2)]
    for p in procs:
        p.start()
    try:
        results = {r: (status, err) for r, status, err in (queue.get() for _ in procs)}
        for p in procs:
            p.join(60)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    for r, (_, err) in results.items():
        assert err is None, f"rank {r}:\n{err}"
    return Path(out), results[0][0]


def _shell(*args):
    return subprocess.run([sys.executable, "-m", "decoder_shell.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


def test_capture_through_vllm_hooks_verifies_and_replays_exact(vllm_capture):
    out, status = vllm_capture
    assert status["state"] == "done", status
    skipped = status["ranks"]["0"]["skipped"]
    # the other group's reduction and the second (one-row) MTP pass were passed over, nothing else
    assert any("not the TP group" in s for s in skipped), skipped
    assert any("after the head collapse" in s for s in skipped), skipped
    v = _shell("verify", str(out), "--record", "--json")
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-2000:]
    rep = json.loads(v.stdout)
    assert rep["linked"] and rep["cross_rank_exact"]
    assert rep["phases"]["draft"] == {"rows": 3, "boundaries": 6, "reductions": 3, "post_pre": 1, "pre": 1, "head": 1}
    assert set(rep["parity"]) == {"allreduce", "mhc_pre", "mhc_pre_streams", "mhc_post_pre", "mhc_post_head"}
    assert rep["parity"]["allreduce"]["exact"] == rep["parity"]["allreduce"]["boundaries"]
    # the order and rounding probes ran on the TP group before the cycle (draft and verify: 3 x 16)
    info = json.loads((out / "corpus.json").read_text())
    assert [(p["kind"], p["n"]) for p in info["collective"]["probes"]] == [("order", 48), ("rounding", 48)]
    assert info["collective"]["inference"]["probes"] == 2 and info["collective"]["how"] == "inferred"
    r = _shell("replay", str(out), "--driver", "cpu", "--epochs", "3", "--changed", "2", "--settle", "0", "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    rr = json.loads(r.stdout)
    assert rr["exact"], rr
