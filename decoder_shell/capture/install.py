"""install_plugin: wire one rank's plugin (and on rank 0 the coordinator and control endpoint)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..atomic import write_atomic
from .control import ControlRoutes, start_control_server
from .coordinator import Coordinator
from .errors import UsageError
from .plugin import CapturePlugin
from .token import create_token_file, default_token_file

ENV_DIR = "DECODER_SHELL_CAPTURE_DIR"
ENV_PORT = "DECODER_SHELL_CAPTURE_PORT"
ENV_TOKEN = "DECODER_SHELL_CAPTURE_TOKEN_FILE"


def rank_and_world(rank: int | None, world: int | None) -> tuple[int, int]:
    if rank is not None and world is not None:
        return int(rank), int(world)
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    raise UsageError("capture.install: pass rank= and world=, initialize torch.distributed first, "
                     "or set RANK and WORLD_SIZE")


def run_dir_for(run_dir) -> Path:
    """The folder all ranks of one service share (channel address and key; mode 0700)."""
    if run_dir is None:
        run_dir = os.environ.get(ENV_DIR) or os.path.join(
            os.path.expanduser("~"), ".cache", "decoder-shell", f"run-{os.environ.get('MASTER_PORT', 'local')}")
    p = Path(run_dir)
    p.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(p, 0o700)
    return p


def install_plugin(*, rank=None, world=None, run_dir=None, token_file=None, control_port=0, geometry=None,
                   service=None) -> CapturePlugin:
    """Create this rank's plugin. On rank 0 also the coordinator, the token file and, unless
    control_port is None (the service mounts plugin.routes on its own server), a control server."""
    rank, world = rank_and_world(rank, world)
    folder = run_dir_for(run_dir)
    if rank != 0:
        return CapturePlugin(rank, world, folder)
    plugin = CapturePlugin(rank, world, folder,
                           coordinator_factory=lambda p: Coordinator(p, service=service, geometry=geometry))
    plugin.routes = ControlRoutes(plugin.coordinator, token="")
    if control_port is None:
        if token_file is None and os.environ.get(ENV_TOKEN) is None:
            raise UsageError("capture.install: a service that mounts the control routes must pass token_file")
        plugin.token_file = Path(token_file or os.environ[ENV_TOKEN])
        plugin.routes.token = create_token_file(plugin.token_file)
        return plugin
    port = int(os.environ.get(ENV_PORT, control_port))
    server = start_control_server(plugin.routes, port)
    port = server.server_address[1]
    plugin.control_server = server
    plugin.token_file = Path(token_file or os.environ.get(ENV_TOKEN) or default_token_file(port))
    plugin.routes.token = create_token_file(plugin.token_file)
    url = f"http://127.0.0.1:{port}"
    write_atomic(folder / "control.json", json.dumps({"url": url, "token_file": str(plugin.token_file)}).encode())
    print(f"decoder-shell capture: control endpoint {url}, token in {plugin.token_file}", file=sys.stderr)
    return plugin
