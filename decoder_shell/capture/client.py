"""The CLI's side of the control endpoint and of a service's generate route (stdlib urllib)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from .control import is_loopback
from .errors import ServiceUnreachable, UsageError


def parse_service_url(url: str) -> tuple[str, int]:
    """http://127.0.0.1:PORT (or localhost / [::1]) -> (base url, port); anything else is a usage error."""
    u = urlsplit(url)
    if u.scheme != "http" or not u.hostname or u.port is None:
        raise UsageError(f"--from-service {url!r}: expected http://127.0.0.1:PORT")
    host = "127.0.0.1" if u.hostname == "localhost" else u.hostname
    if not is_loopback(host):
        raise UsageError(f"--from-service {url!r}: the control endpoint listens on loopback only "
                         "(run shell capture on the service's host)")
    netloc = f"[{host}]:{u.port}" if ":" in host else f"{host}:{u.port}"
    return f"http://{netloc}", u.port


class ServiceClient:
    def __init__(self, base: str, token: str | None, timeout: float = 30.0):
        self.base = base.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(self, method: str, path: str, body: dict | None = None, timeout: float | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            msg = _error_text(e)
            if e.code == 401:
                raise ServiceUnreachable(f"{self.base} refused the token (401): {msg}") from None
            raise ServiceUnreachable(f"{method} {self.base}{path}: HTTP {e.code}: {msg}") from None
        except urllib.error.URLError as e:
            raise ServiceUnreachable(f"cannot reach {self.base} ({_reason(e)}); is the service running?") from None
        except (TimeoutError, OSError) as e:
            raise ServiceUnreachable(f"{method} {self.base}{path}: {e}") from None
        except ValueError:
            raise ServiceUnreachable(f"{method} {self.base}{path}: the answer is not JSON") from None


def _error_text(e: urllib.error.HTTPError) -> str:
    try:
        return json.loads(e.read()).get("error", e.reason)
    except Exception:
        return str(e.reason)


def _reason(e: urllib.error.URLError) -> str:
    r = e.reason
    return getattr(r, "strerror", None) or str(r)
