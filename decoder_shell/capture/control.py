"""The control endpoint: arm, progress, done. Loopback only, every request authenticated.

Routes (JSON; header `Authorization: Bearer <token>`):
  GET  /capture/info     the service's ranks, pids and declared geometry
  POST /capture/arm      {"geometry": {...}, "cycles": N, "out": "/abs/folder"} -> 202 {"capture": id}
  GET  /capture/status   state, per-rank progress, corpus folders when done
  POST /capture/disarm   cancel a pending or running capture
A request from a non-loopback address gets 403 and a wrong or missing token 401, before anything
else is read: neither can arm. The server itself binds 127.0.0.1 only.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOOPBACK = "127.0.0.1"
MAX_BODY = 1 << 16
BACKLOG = 256  # pending connections the kernel holds: hundreds of clients at once wait, none is refused


class LoopbackHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server with a listen backlog for hundreds of concurrent clients."""

    request_queue_size = BACKLOG
    daemon_threads = True


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback; False for anything else, names included."""
    try:
        ip = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def authorized(header: str | None, token: str) -> bool:
    if not token or not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer "):].strip().encode(), token.encode())


class ControlRoutes:
    """Request -> (HTTP status, JSON body). Shared by the standalone server and services that mount it."""

    def __init__(self, coordinator, token: str):
        self.coordinator = coordinator
        self.token = token

    def handle(self, method: str, path: str, client: str, auth: str | None, body: bytes) -> tuple[int, dict]:
        if not is_loopback(client):
            return 403, {"error": "the control endpoint answers loopback clients only"}
        if not authorized(auth, self.token):
            return 401, {"error": "missing or wrong token (send Authorization: Bearer <token from the token file>)"}
        route = path.split("?", 1)[0].rstrip("/")
        c = self.coordinator
        if method == "GET" and route == "/capture/info":
            return 200, c.info()
        if method == "GET" and route == "/capture/status":
            return 200, c.status()
        if method == "POST" and route in ("/capture/arm", "/capture/disarm"):
            try:
                req = json.loads(body or b"{}")
                if not isinstance(req, dict):
                    raise ValueError("not an object")
            except (ValueError, UnicodeDecodeError) as e:
                return 400, {"error": f"request body is not a JSON object ({e})"}
            return c.arm(req) if route == "/capture/arm" else c.disarm()
        return 404, {"error": f"no route {method} {route}"}


def read_body(handler: BaseHTTPRequestHandler, cap: int = MAX_BODY) -> bytes | None:
    """The request body, at most `cap` bytes; None (an error answer already sent) when the
    Content-Length is absent on a POST, not a number, negative or over the cap."""
    raw = handler.headers.get("Content-Length")
    if raw is None:
        if handler.command != "POST":
            return b""
        send_json(handler, 411, {"error": "a POST needs a Content-Length"})
        return None
    try:
        n = int(raw.strip()) if raw.strip().isdigit() and len(raw.strip()) <= 12 else -1
    except ValueError:
        n = -1
    if not 0 <= n <= cap:
        send_json(handler, 413 if n > cap else 400, {"error": f"Content-Length must be a number from 0 to {cap}"})
        return None
    return handler.rfile.read(n) if n > 0 else b""


def serve_request(handler: BaseHTTPRequestHandler, routes: ControlRoutes, method: str) -> None:
    """Answer one control request on an http.server handler (reads a bounded body)."""
    body = read_body(handler)
    if body is None:
        return
    code, payload = routes.handle(method, handler.path, handler.client_address[0],
                                  handler.headers.get("Authorization"), body)
    send_json(handler, code, payload)


def send_json(handler: BaseHTTPRequestHandler, code: int, payload: dict) -> None:
    data = (json.dumps(payload, sort_keys=True, default=str) + "\n").encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    if code == 401:
        handler.send_header("WWW-Authenticate", "Bearer")
    try:
        handler.end_headers()
        handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client left before the answer (a capture that finished while its generate request ran)


class _Handler(BaseHTTPRequestHandler):
    routes: ControlRoutes = None

    def do_GET(self):
        serve_request(self, self.routes, "GET")

    def do_POST(self):
        serve_request(self, self.routes, "POST")

    def log_message(self, *args):
        pass


def start_control_server(routes: ControlRoutes, port: int = 0) -> ThreadingHTTPServer:
    """A standalone control server on 127.0.0.1:port (0: any free port), served by a daemon thread."""
    handler = type("ControlHandler", (_Handler,), {"routes": routes})
    server = LoopbackHTTPServer((LOOPBACK, port), handler)
    threading.Thread(target=server.serve_forever, name="decoder-shell-control", daemon=True).start()
    return server
