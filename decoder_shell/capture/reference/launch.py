"""`shell serve-reference`: start R rank processes and keep them together.

The launcher imports torch and transformers once and forks the ranks (start-up in seconds rather
than R fresh interpreters), binds the HTTP socket on 127.0.0.1 before forking (a busy port fails at
once), and watches the ranks: when one exits, the others are stopped, since a TP service with a
missing rank cannot answer anything.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from ..errors import UsageError
from ..token import default_token_file


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(opts) -> int:
    """Run the service until a signal or a rank exits; returns the exit code."""
    from .shape import ModelShape
    ModelShape().check_tp(opts.tp)
    if opts.verify_rows < 1 or opts.verify_rows > 16:
        raise UsageError("--verify-rows must be between 1 and 16")
    if opts.mhc not in ("transformers", "shell"):
        raise UsageError("--mhc must be 'transformers' or 'shell'")
    from http.server import BaseHTTPRequestHandler

    from ..control import LoopbackHTTPServer
    if opts.token_file and os.path.lexists(opts.token_file):
        raise UsageError(f"--token-file {opts.token_file}: exists; the service writes a new token file and removes "
                         "it at exit, so it never takes over a file it did not create (remove it or pick another)")
    try:
        http = LoopbackHTTPServer(("127.0.0.1", opts.port), BaseHTTPRequestHandler)
    except OSError as e:
        raise UsageError(f"cannot listen on 127.0.0.1:{opts.port} ({e.strerror})") from None
    try:
        backend = _backend(opts.backend, opts.tp)
    except Exception:
        http.server_close()
        raise
    from . import server as rank_server  # imports torch and transformers before the fork
    http.RequestHandlerClass = rank_server.Handler
    port = http.server_address[1]
    run_dir = tempfile.mkdtemp(prefix="decoder-shell-serve-")
    token_file = opts.token_file or str(default_token_file(port))
    opts = replace(opts, port=port, backend=backend, token_file=token_file, run_dir=run_dir,
                   master_port=free_port())
    forked = backend != "nccl"  # CUDA wants fresh interpreters; rank 0 then binds the port itself
    ctx = mp.get_context("fork" if forked else "spawn")
    if not forked:
        http.server_close()
    ranks = [ctx.Process(target=rank_server.rank_main, args=(r, opts, http if forked else None),
                         name=f"reference-rank{r}") for r in range(opts.tp)]
    stop = {"signal": None}

    def on_signal(signum, frame):
        stop["signal"] = signum

    old = {}
    try:
        for p in ranks:
            p.start()
        old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        http.server_close()
        while stop["signal"] is None:
            dead = [p for p in ranks if p.exitcode is not None]
            if dead:
                print(f"serve-reference: rank {ranks.index(dead[0])} exited with code {dead[0].exitcode}; "
                      "stopping the service", file=sys.stderr)
                return 1
            time.sleep(0.1)
        return 0
    finally:
        _stop(ranks)
        for s, h in old.items():
            signal.signal(s, h)
        shutil.rmtree(run_dir, ignore_errors=True)
        Path(token_file).unlink(missing_ok=True)


def _stop(ranks) -> None:
    for p in ranks:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5
    for p in ranks:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            os.kill(p.pid, signal.SIGKILL)
            p.join()


def _backend(name: str, tp: int) -> str:
    if name == "gloo":
        return "gloo"
    gpus = _gpu_count()
    if name == "nccl" and gpus < tp:
        from ...errors import DriverUnavailable
        raise DriverUnavailable(f"--backend nccl needs one GPU per rank ({tp}); found {gpus}")
    if name in ("nccl", "auto"):
        return "nccl" if gpus >= tp else "gloo"
    raise UsageError("--backend must be auto, gloo or nccl")


def _gpu_count() -> int:
    """GPUs visible, counted without initialising CUDA in the launcher (the ranks will)."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
