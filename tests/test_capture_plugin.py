"""The plugin in two real gloo rank processes, with the explicit marker API (record_mhc) and three kinds
of all-reduce (c10d, functional, an engine-registered custom op): arming agrees on one cycle, disarmed
cycles run no capture code, the corpus verifies bit-exact."""

import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from decoder_shell.capture.assemble import assemble
from decoder_shell.capture.errors import CaptureError
from decoder_shell.capture.recorder import Event
from decoder_shell.contracts import mhc
from decoder_shell.contracts.numerics import BF16, F32
from decoder_shell.corpus.store import Corpus
from decoder_shell.corpus.verify import verify
from decoder_shell.geometry import Geometry

GEOMETRY = Geometry(preset="toy", hidden=16, layers=1, ranks=2, verify_rows=2, draft_rows=0)
CYCLES = 4


def _params(rng, n_mix, d):
    return (rng.standard_normal((n_mix, 4 * d), dtype=F32) / np.float32(np.sqrt(4 * d)),
            rng.standard_normal(n_mix, dtype=F32) * np.float32(0.5), rng.uniform(0.25, 1.5, 3).astype(F32))


def _t(a):
    from decoder_shell.capture.tensors import to_torch
    return to_torch(np.asarray(a))


def _toy_cycle(capture, rank, k, params, observe):
    """One verify phase of a 1-layer toy model whose mHC is the contract, recorded by hand."""
    import torch.distributed._functional_collectives as fc
    from decoder_shell.capture.tensors import to_numpy
    g = GEOMETRY
    rng = np.random.default_rng([k, rank])
    cycle = capture.cycle()
    with cycle:
        with capture.phase("verify"):
            observe.append((k, cycle is capture._NULL, len(torch.nn.modules.module._global_forward_hooks),
                            torch._C._len_torch_dispatch_stack()))
            x = torch.from_numpy(rng.standard_normal((g.verify_rows, g.hidden), dtype=F32)).to(torch.bfloat16)
            dist.all_reduce(x)
            streams = np.repeat(to_numpy(x)[:, None, :], 4, axis=1)
            for s in range(2):
                fn, base, scale = params[s]
                pre, post, comb = mhc.mhc_split(mhc.mhc_mixes(streams, fn, 1e-6), base, scale, 4)
                y = mhc.collapse(pre, streams)
                capture.record_mhc("hc", _t(streams), _t(fn), _t(base), _t(scale), _t(y), _t(post), _t(comb))
                partial = _t(y) * float(rank + 1)
                if s == 0:
                    out = fc.wait_tensor(fc.all_reduce(partial, "sum", dist.group.WORLD))
                else:  # an op an engine registers itself, as vLLM does
                    out = torch.ops.vllm.all_reduce(partial, "tp")
                streams = mhc.mhc_post(to_numpy(out), streams, post, comb)
            fn, base, scale = params[2]
            y = mhc.mhc_head_collapse(streams, fn, base, scale[:1])
            capture.record_mhc("head", _t(streams), _t(fn), _t(base), _t(scale[:1]), _t(y))


def _register_engine_op():
    """An out-of-place all-reduce registered the way vLLM registers `vllm::all_reduce`."""
    @torch.library.custom_op("vllm::all_reduce", mutates_args=())
    def all_reduce(t: torch.Tensor, group_name: str) -> torch.Tensor:
        out = t.clone()
        dist.all_reduce(out)
        return out


def _rank(rank, port, run_dir, out, queue):
    torch.set_num_threads(1)
    _register_engine_op()
    from decoder_shell import capture
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    plugin = capture.install(rank=rank, world=2, run_dir=run_dir, token_file=os.path.join(run_dir, "token"),
                             control_port=None)
    rng = np.random.default_rng(7)
    params = [_params(rng, 24, GEOMETRY.hidden), _params(rng, 24, GEOMETRY.hidden), _params(rng, 4, GEOMETRY.hidden)]
    observe = []
    if rank == 0:
        code, status = plugin.coordinator.arm({"geometry": GEOMETRY.to_json(), "cycles": 1, "out": out})
        assert code == 202, status
    for k in range(CYCLES):
        _toy_cycle(capture, rank, k, params, observe)
    status = None
    if rank == 0:
        for _ in range(600):
            status = plugin.coordinator.status()
            if status["state"] in ("done", "error"):
                break
            import time
            time.sleep(0.05)
    dist.barrier()
    queue.put((rank, observe, status))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def toy_capture(tmp_path_factory):
    base = tmp_path_factory.mktemp("toy")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    out = str(base / "corpus")
    procs = [ctx.Process(target=_rank, args=(r, port, str(base / "run"), out, queue)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        results = dict((r, rest) for r, *rest in (queue.get() for _ in procs))
        for p in procs:
            p.join(60)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    return Path(out), results


def test_marker_api_capture_verifies_bit_exact(toy_capture):
    out, results = toy_capture
    status = results[0][1]
    assert status["state"] == "done", status
    assert status["start_cycle"] == 1  # armed before cycle 0: rank 0 arms every rank from the next cycle
    rep = verify(Corpus.open(out))
    assert rep["ok"] and rep["parity_exact"], rep
    # the phase assembled: c10d, functional and vllm::all_reduce each recorded once (the custom op's inner
    # c10d call was not recorded a second time), and nothing was passed over
    assert not results[0][1]["ranks"]["0"]["skipped"]
    assert Corpus.open(out).info.collective["how"] == "inferred"


def test_disarmed_cycles_run_no_capture_code(toy_capture):
    _, results = toy_capture
    start = results[0][1]["start_cycle"]
    for rank in (0, 1):
        observe = results[rank][0]
        assert [k for k, *_ in observe] == list(range(CYCLES))
        for k, null, hooks, modes in observe:
            if k == start:
                assert (null, hooks, modes) == (False, 1, 1), f"rank {rank} armed cycle {k}"
            else:
                assert (null, hooks, modes) == (True, 0, 0), f"rank {rank} disarmed cycle {k} ran capture code"


def test_events_out_of_geometry_order_are_refused():
    g = GEOMETRY
    phase = g.phase("verify")
    m, d = g.verify_rows, g.hidden
    c = Event("collective", {"x": np.zeros((m, d), BF16), "out": np.zeros((m, d), BF16)})
    with pytest.raises(CaptureError, match="expects 3 all-reduces, 2 hyper-connections, 1 head"):
        assemble(g, phase, [c, c])
