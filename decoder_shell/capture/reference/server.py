"""One rank of the reference service: model, capture plugin, and (rank 0) the HTTP front end.

Rank 0 answers HTTP on 127.0.0.1 (generate, health, and the capture control routes) and feeds each
request to its main thread, which broadcasts it to every rank; all ranks then run the same cycles.
Every socket of the service is on loopback: the HTTP server, the torch TCPStore (rank 0 binds its
listening socket to 127.0.0.1 and hands it to the store) and gloo's/NCCL's own sockets (`lo`,
unless GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME name another interface).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import sys
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler

import torch
import torch.distributed as dist

from ... import capture
from ..control import BACKLOG, LOOPBACK, LoopbackHTTPServer, read_body, send_json, serve_request
from .engine import Engine
from .mhc_shell import swap_in
from .model import RankModel
from .options import ServeOptions
from .shape import ModelShape

MAX_PROMPT = 512
MAX_NEW = 512
GENERATE_TIMEOUT_S = 600
MAX_GENERATE_BODY = 1 << 16


def quiet_transformers() -> None:
    """The service calls transformers' modules with their current keyword names; their deprecation
    notices (past_key_values, repeated per request) would bury the service's own lines."""
    import warnings

    from transformers.utils import logging as hf_logging
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    hf_logging.set_verbosity_error()


def rank_main(rank: int, opts: ServeOptions, http_server=None) -> None:
    """Entry point of a rank process (forked by the launcher; rank 0 serves the inherited HTTP socket)."""
    if rank != 0 and http_server is not None:
        http_server.server_close()  # only rank 0 answers HTTP
        http_server = None
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher stops the ranks
    quiet_transformers()
    torch.set_num_threads(1)
    if http_server is None and rank == 0:
        http_server = LoopbackHTTPServer((LOOPBACK, opts.port), Handler)
    device = rank_device(opts, rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(opts.backend, store=loopback_store(rank, opts), rank=rank, world_size=opts.tp,
                            timeout=timedelta(hours=24))
    shape = ModelShape.named(opts.preset, opts.layers, opts.routed_experts)
    model = RankModel(shape, rank, opts.tp, opts.seed, device)
    if opts.mhc == "shell":
        swap_in(model)
    geometry = shape.geometry(opts.tp, opts.verify_rows)
    plugin = None
    if opts.capture:
        plugin = capture.install(rank=rank, world=opts.tp, run_dir=opts.run_dir, token_file=opts.token_file,
                                 control_port=None, geometry=geometry,
                                 service={"service": "decoder-shell reference", "mhc": opts.mhc,
                                          "backend": opts.backend, "seed": opts.seed,
                                          "device": str(device), "preset": opts.preset,
                                          "transformers": _version("transformers"), "torch": torch.__version__})
    engine = Engine(model, opts.verify_rows)
    dist.barrier()
    if rank == 0:
        _serve_rank0(engine, plugin, opts, geometry, http_server)
    else:
        _follow(engine)


def rank_device(opts: ServeOptions, rank: int) -> torch.device:
    """nccl: GPU `rank` (one per rank); gloo on cuda: all ranks share GPU 0 (gloo reduces CUDA
    tensors through host copies); otherwise the CPU."""
    if opts.device != "cuda":
        return torch.device("cpu")
    return torch.device(f"cuda:{rank}" if opts.backend == "nccl" else "cuda:0")


def loopback_store(rank: int, opts: ServeOptions):
    """The rendezvous store on 127.0.0.1 only: rank 0 binds the listening socket itself (a TCPStore
    given just a port listens on every interface) and gloo/NCCL keep their sockets on `lo`."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    timeout = timedelta(hours=24)
    if rank != 0:
        return dist.TCPStore(LOOPBACK, opts.master_port, opts.tp, False, timeout=timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, opts.master_port))
    sock.listen(BACKLOG)
    return dist.TCPStore(LOOPBACK, opts.master_port, opts.tp, True, timeout=timeout, wait_for_workers=False,
                         master_listen_fd=sock.detach())  # the store owns the descriptor from here


def _follow(engine: Engine) -> None:
    while True:
        cmd = [None]
        dist.broadcast_object_list(cmd, src=0)
        if cmd[0] is None:
            return
        engine.generate(**cmd[0])


def _serve_rank0(engine: Engine, plugin, opts: ServeOptions, geometry, http_server) -> None:
    jobs: queue.Queue = queue.Queue()
    http_server.app = {"jobs": jobs, "plugin": plugin, "health": {
        "ok": True, "tp": opts.tp, "mhc": opts.mhc, "backend": opts.backend, "verify_rows": opts.verify_rows,
        "device": opts.device, "preset": opts.preset,
        "capture": plugin is not None, "geometry": geometry.to_json()}}
    token = f"; capture token in {opts.token_file}" if plugin is not None else "; capture plugin not installed"
    g = geometry
    print(f"serving http://127.0.0.1:{http_server.server_address[1]} (TP {opts.tp}, {opts.backend} on "
          f"{opts.device}, hidden {g.hidden}, layers {g.layers}, mhc {opts.mhc}, verify rows {opts.verify_rows}, "
          f"ready in {time.monotonic() - opts.started:.1f} s){token}", flush=True)
    # answered only after the line above is out: a client that sees /health also sees the ready line
    threading.Thread(target=http_server.serve_forever, name="reference-http", daemon=True).start()
    while True:
        job = jobs.get()
        dist.broadcast_object_list([job["cmd"]], src=0)
        try:
            job["result"] = engine.generate(**job["cmd"])
        except Exception as e:  # reported to the client; every rank saw the same input
            job["error"] = f"{type(e).__name__}: {e}"
        job["done"].set()


class Handler(BaseHTTPRequestHandler):
    """HTTP front end of rank 0 (server.app is set by the rank once its model is ready)."""

    def do_GET(self):
        app = self.server.app
        if self.path.startswith("/capture/"):
            return self._capture("GET")
        if self.path.rstrip("/") in ("/health", ""):
            return send_json(self, 200, app["health"])
        send_json(self, 404, {"error": f"no route GET {self.path}"})

    def do_POST(self):
        if self.path.startswith("/capture/"):
            return self._capture("POST")
        if self.path.rstrip("/") != "/generate":
            return send_json(self, 404, {"error": f"no route POST {self.path}"})
        body = read_body(self, MAX_GENERATE_BODY)
        if body is None:
            return
        try:
            cmd = parse_generate(json.loads(body or b"{}"))
        except (ValueError, RecursionError) as e:
            return send_json(self, 400, {"error": str(e) or "request body is nested too deeply"})
        job = {"cmd": cmd, "done": threading.Event()}
        self.server.app["jobs"].put(job)
        if not job["done"].wait(GENERATE_TIMEOUT_S):
            return send_json(self, 504, {"error": "generate timed out"})
        if "error" in job:
            return send_json(self, 500, {"error": job["error"]})
        r = job["result"]
        r["text"] = bytes(r["tokens"]).decode("utf-8", errors="replace")
        send_json(self, 200, r)

    def _capture(self, method):
        plugin = self.server.app["plugin"]
        if plugin is None:
            return send_json(self, 404, {"error": "the capture plugin is not installed (service started with --no-capture)"})
        serve_request(self, plugin.routes, method)

    def log_message(self, *args):
        pass


def parse_generate(req) -> dict:
    """Validate a generate request before any rank sees it (bytes are the tokens: vocab 256)."""
    if not isinstance(req, dict):
        raise ValueError("request body must be a JSON object")
    prompt = req.get("prompt", "")
    ids = list(prompt.encode()) if isinstance(prompt, str) else prompt
    if (not isinstance(ids, list) or not ids or len(ids) > MAX_PROMPT
            or not all(isinstance(i, int) and 0 <= i < 256 for i in ids)):
        raise ValueError(f"prompt must be a non-empty string or a list of 1..{MAX_PROMPT} token ids in 0..255")
    n = req.get("max_new_tokens", 16)
    if not isinstance(n, int) or not 1 <= n <= MAX_NEW:
        raise ValueError(f"max_new_tokens must be an integer from 1 to {MAX_NEW}")
    return {"prompt": ids, "max_new_tokens": n}


def _version(name: str) -> str:
    m = sys.modules.get(name)
    return getattr(m, "__version__", "") if m else ""
