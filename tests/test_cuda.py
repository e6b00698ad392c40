"""CUDA driver: kernels bit-identical to the contracts, replay exact. Skips where no CUDA GPU exists;
the results measured on a GPU are recorded in docs/BENCHMARKS.md and docs/results/."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from decoder_shell.drivers import get_driver
from decoder_shell.errors import DriverUnavailable

ROOT = Path(__file__).resolve().parents[1]


def _cuda():
    try:
        return get_driver("cuda")
    except DriverUnavailable as e:
        pytest.skip(f"no CUDA GPU here: {e}")


@pytest.mark.gpu
def test_random_cycles_bit_exact_on_gpu():
    from decoder_shell.replay.selfcheck import self_check
    summary = self_check(_cuda(), cases=12, seed=20261129)
    assert summary["elements_compared"] > 0
    assert summary["mismatching_elements"] == 0, summary["failures"][:2]


@pytest.mark.gpu
def test_fma_build_is_caught():
    from decoder_shell.commands.program import build_cycle, reference
    from decoder_shell.contracts.allreduce import RingContract
    from decoder_shell.corpus.synth import injected_values
    from decoder_shell.geometry import Geometry
    from decoder_shell.replay.selfcheck import run_case
    drv = _cuda()
    cyc = build_cycle(Geometry(preset="t", hidden=4096, layers=1, ranks=2, verify_rows=2, draft_rows=0), RingContract())
    values = injected_values(cyc, 5)
    _, bad = run_case(drv, cyc, values, {c.index: "fma" for c in cyc.commands if c.op != "allreduce"},
                      reference(cyc, values))
    assert sum(bad.values()) > 0


@pytest.mark.gpu
def test_shipped_corpus_replays_exact_on_gpu():
    _cuda()
    r = subprocess.run([sys.executable, "-m", "decoder_shell.cli", "replay", str(ROOT / "corpus"), "--driver", "cuda",
                        "--epochs", "20", "--changed", "4"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "20/20 graph epochs exact" in r.stdout and "4/4 changed epochs exact" in r.stdout


@pytest.mark.gpu
def test_one_process_per_rank_on_one_gpu_replays_exact():
    """The multi-process path (IPC-mapped peers, epoch-tagged arrival slots) with both ranks of the
    shipped corpus time-sharing one GPU: bit-exact over graph and changed epochs."""
    _cuda()
    r = subprocess.run([sys.executable, "-m", "decoder_shell.cli", "replay", str(ROOT / "corpus"), "--driver", "cuda",
                        "--placement", "processes", "--epochs", "8", "--changed", "2"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "8/8 graph epochs exact" in r.stdout and "2/2 changed epochs exact" in r.stdout
    assert "one process per rank" in r.stdout


@pytest.mark.gpu
def test_plain_edges_and_programmatic_edges_give_the_same_bits():
    from decoder_shell.commands.program import build_cycle, reference
    from decoder_shell.contracts.allreduce import RingContract
    from decoder_shell.corpus.synth import injected_values
    from decoder_shell.geometry import preset
    from decoder_shell.replay.selfcheck import run_case
    _cuda()
    cyc = build_cycle(preset("dsv4-flash", tp=2, verify_rows=2, draft_rows=1), RingContract())
    values = injected_values(cyc, 9)
    want = reference(cyc, values)
    for pdl in (True, False):
        drv = get_driver("cuda", placement="emulated", pdl=pdl)
        _, bad = run_case(drv, cyc, values, {}, want)
        assert sum(bad.values()) == 0, (pdl, bad)


@pytest.mark.gpu
def test_a_session_whose_kernel_does_not_compile_gives_back_its_device_memory():
    """A planted compile error in a user kernel, after the arenas and the driver's own module exist:
    BuildError (exit 4), and the device's free memory is what it was before (nothing leaked)."""
    from decoder_shell.commands.program import build_cycle
    from decoder_shell.contracts.allreduce import RingContract
    from decoder_shell.drivers.cuda.session import CudaSession
    from decoder_shell.errors import BuildError
    from decoder_shell.geometry import preset
    from decoder_shell.replay.candidates import KernelCandidate
    _cuda()
    drv = get_driver("cuda", placement="emulated")
    cyc = build_cycle(preset("dsv4-flash", tp=2, verify_rows=2, draft_rows=1), RingContract())
    mhc = next(c for c in cyc.commands if c.op != "allreduce")
    cand = KernelCandidate(name="planted", spec="planted.json", code_path="planted.cu", kind="source",
                           language="cuda", entry="k", grid=(1, 1, 1), block=(32, 1, 1), shared_bytes=0, args=(),
                           code=b'extern "C" __global__ void k() { undefined_name(); }\n')
    CudaSession(drv, cyc, None).close()  # the driver's own module cached and the context warm
    free_before = drv.cu.cuMemGetInfo()[0]
    for _ in range(3):
        with pytest.raises(BuildError) as err:
            CudaSession(drv, cyc, {mhc.index: cand})
        assert err.value.exit_code == 4 and "undefined_name" in str(err.value)
    assert drv.cu.cuMemGetInfo()[0] == free_before


@pytest.mark.gpu
def test_moe_corpora_replay_exact_on_gpu(tmp_path):
    """The MoE draft commands as graph nodes: tiny-moe corpora (DSpark, TP2) with packed and expanded
    weights replay bit-exact, graph and changed epochs, and the moe-expanded candidate on the packed one
    is exact too (the gate's mismatch count)."""
    _cuda()
    import json
    cli = [sys.executable, "-m", "decoder_shell.cli"]
    for w in ("packed", "expanded"):
        out = tmp_path / w
        subprocess.run([*cli, "synth", "--preset", "tiny-moe", "--tp", "2", "--draft-rows", "5", "--draft-kind",
                        "dspark", "--moe-weights", w, "--out", str(out), "-q"], check=True, timeout=600)
        r = subprocess.run([*cli, "replay", str(out), "--driver", "cuda", "--placement", "emulated", "--epochs", "5",
                            "--changed", "2", "--json"], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["exact"]
    verdict = tmp_path / "gate.json"
    subprocess.run([*cli, "gate", str(tmp_path / "packed"), "--driver", "cuda", "--placement", "emulated",
                    "--candidate", "experts=moe-expanded", "--epochs", "5", "--changed", "2", "--reps", "1", "-q",
                    "--out", str(verdict)], capture_output=True, text=True, timeout=600)
    v = json.loads(verdict.read_text())
    assert v["exactness"]["baseline"]["exact"] and v["exactness"]["candidate"]["exact"], v["exactness"]


@pytest.mark.gpu
@pytest.mark.parametrize("hidden", [4096, 1536])
def test_fused_norm_cycle_bit_exact_on_gpu(hidden):
    """vLLM's fused RMSNorm collapse: the rmsnorm node after each hc_pre gives the contract's bits."""
    from decoder_shell.commands.program import build_cycle, reference
    from decoder_shell.contracts.allreduce import RingContract
    from decoder_shell.corpus.synth import injected_values
    from decoder_shell.geometry import Geometry
    from decoder_shell.replay.selfcheck import run_case
    drv = _cuda()
    g = Geometry(preset="t", hidden=hidden, layers=2, ranks=2, verify_rows=2, draft_rows=1, fused_norm=True)
    cyc = build_cycle(g, RingContract())
    values = injected_values(cyc, 17)
    _, bad = run_case(drv, cyc, values, {}, reference(cyc, values))
    assert sum(bad.values()) == 0, bad


@pytest.mark.gpu
def test_every_mhc_variant_on_every_command_it_fits_is_exact_and_ends():
    """tools/cuda_check.py's sweep (every mHC variant at fixed geometries, one rank to eight, D from 1024
    to 7168 and 1500) plus the FMA control, in a process of its own: a kernel that never ends fails by
    the driver's deadline with the case named (exit 4) instead of hanging the tests. The cluster kernel
    once hung at every D with a Sinkhorn form it never ran (docs/CUDA.md)."""
    from decoder_shell.replay.selfcheck import sweep_cases
    _cuda()
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "cuda_check.py"), "--cases", "0"],
                       capture_output=True, text=True, timeout=900,
                       env={**os.environ, "DECODER_SHELL_DEADLINE_S": "30"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| sweep mismatching_elements | 0 |" in r.stdout
    n = sum(1 for _ in sweep_cases())
    assert f"sweep case {n}/{n}:" in r.stderr  # every case of the sweep ran


@pytest.mark.gpu
def test_a_kernel_that_never_ends_is_one_line_and_exit_4_by_the_deadline(tmp_path):
    """A user mHC kernel that spins for ever, gated on the shipped corpus with a 3 s deadline: the gate
    ends with one line naming what did not finish, exit 4, within the test's minute."""
    _cuda()
    (tmp_path / "spin.cu").write_text('extern "C" __global__ void spin(int* y) {\n'
                                      '  volatile int* p = y; while (p[0] != 12345) {}\n}\n')
    (tmp_path / "spin.json").write_text('{"source": "spin.cu", "entry": "spin", "grid": [1], "block": [32], '
                                        '"args": ["out:y"], "op": "mhc_post_pre"}')
    r = subprocess.run([sys.executable, "-m", "decoder_shell.cli", "gate", str(ROOT / "corpus"), "--driver", "cuda",
                        "--candidate", f"mhc_post_pre=@{tmp_path / 'spin.json'}", "--epochs", "2"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "DECODER_SHELL_DEADLINE_S": "3"})
    assert r.returncode == 4, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "did not finish within 3 s" in lines[0], r.stderr[-2000:]


@pytest.mark.gpu
def test_the_short_quotient_is_fdiv_rn_on_the_device():
    """tools/div_check.py on a prefix of the mantissa pairs (the whole 2^46 takes ~70 s on an H200 and is
    recorded in docs/BENCHMARKS.md): div_short is __fdiv_rn, the reciprocal estimate scales over every
    exponent of div_range, and the uncorrected control differs (the counts are live)."""
    _cuda()
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "div_check.py"), "--denominators", "4096"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    assert "34,359,738,368 pairs, 0 mismatching" in r.stdout
    assert "1,006,632,960 inputs, 0 mismatching" in r.stdout
