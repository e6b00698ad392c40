"""The real reference service (subprocesses, gloo, HTTP on loopback) captured with `shell capture`,
then verified and replayed; the control endpoint's security; a rank killed mid-capture."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import zstandard

from decoder_shell.capture.control import ControlRoutes, is_loopback
from decoder_shell.corpus.blobs import BlobStore, digest_of

SHELL = [sys.executable, "-m", "decoder_shell.cli"]
START_TIMEOUT_S = 180
RUN_TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shell(*args, timeout=RUN_TIMEOUT_S):
    return subprocess.run([*SHELL, *map(str, args)], capture_output=True, text=True, timeout=timeout)


class Service:
    """`shell serve-reference` as a process group, always killed at the end."""

    def __init__(self, folder: Path, tp: int, mhc: str, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token_file = folder / f"token-{self.port}"
        self.log = folder / f"service-{self.port}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [*SHELL, "serve-reference", "--tp", str(tp), "--port", str(self.port), "--mhc", mhc,
                 "--token-file", str(self.token_file), "--backend", "gloo", *extra],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited: {self.log.read_text()}")
            try:
                self.health = self.get("/health", token=None)
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"service did not start in {START_TIMEOUT_S} s: {self.log.read_text()}")
                time.sleep(0.3)

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    def request(self, method, path, body=None, token="__file__", timeout=60):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        token = self.token if token == "__file__" else token
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def get(self, path, token="__file__"):
        return self.request("GET", path, token=token)

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(15)
            except ProcessLookupError:
                pass
        try:  # ranks left behind by a launcher that was killed
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def tp2_shell(tmp_path_factory):
    s = Service(tmp_path_factory.mktemp("tp2"), 2, "shell")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def tp4_transformers(tmp_path_factory):
    s = Service(tmp_path_factory.mktemp("tp4"), 4, "transformers")
    yield s
    s.stop()


def capture(svc: Service, out: Path, *extra):
    r = shell("capture", "--from-service", svc.url, "--token-file", svc.token_file, "--out", out, "--json", *extra)
    assert "Traceback" not in r.stderr, r.stderr
    return r, (json.loads(r.stdout) if r.returncode in (0, 1) and r.stdout.strip() else None)


def replay_exact(corpus: Path) -> dict:
    r = shell("replay", corpus, "--epochs", 70, "--changed", 8, "--driver", "cpu", "--json")
    assert r.returncode == 0, r.stderr + r.stdout[-2000:]
    rep = json.loads(r.stdout)
    assert rep["exact"] and rep["summary"] == {"graph": {"epochs": 70, "exact": 70},
                                               "changed": {"epochs": 8, "exact": 8}}
    return rep


# --- security ------------------------------------------------------------------------------
def test_wrong_or_missing_token_gets_401_and_arms_nothing(tp2_shell, tmp_path):
    before = tp2_shell.get("/capture/status")
    body = {"geometry": tp2_shell.health["geometry"], "cycles": 1, "out": str(tmp_path / "c")}
    for token in ("not-the-token", None, ""):
        with pytest.raises(urllib.error.HTTPError) as e:
            tp2_shell.request("POST", "/capture/arm", body, token=token)
        assert e.value.code == 401
    for path in ("/capture/status", "/capture/info"):
        with pytest.raises(urllib.error.HTTPError) as e:
            tp2_shell.request("GET", path, token="wrong")
        assert e.value.code == 401
    assert tp2_shell.get("/capture/status") == before
    assert not (tmp_path / "c").exists()
    assert (os.stat(tp2_shell.token_file).st_mode & 0o777) == 0o600


def _listening(port: int) -> list[str]:
    """Local addresses of the LISTEN sockets on `port` (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, _, st = line.split()[1:4]
            addr, p = local.split(":")
            if int(p, 16) == port and st == "0A":
                found.append(addr)
    return found


def test_control_endpoint_listens_on_loopback_only(tp2_shell):
    assert _listening(tp2_shell.port) == ["0100007F"]  # 127.0.0.1, nothing else, no IPv6
    others = {ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    for host in sorted(h for h in others if not is_loopback(h)):
        with pytest.raises(OSError):
            socket.create_connection((host, tp2_shell.port), timeout=2).close()


@pytest.mark.parametrize("host,ok", [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True),
                                     ("::ffff:127.0.0.1", True), ("10.0.0.5", False), ("192.168.1.20", False),
                                     ("::ffff:10.0.0.5", False), ("2001:db8::1", False), ("localhost", False),
                                     ("", False)])
def test_address_filter(host, ok):
    assert is_loopback(host) is ok


def test_non_loopback_request_is_refused_before_anything_is_touched():
    routes = ControlRoutes(coordinator=None, token="secret")  # any use of the coordinator would raise
    code, body = routes.handle("POST", "/capture/arm", "10.0.0.5", "Bearer secret", b"{}")
    assert code == 403 and "loopback" in body["error"]
    assert routes.handle("POST", "/capture/arm", "127.0.0.1", "Bearer nope", b"{}")[0] == 401
    assert routes.handle("POST", "/capture/arm", "127.0.0.1", None, b"{}")[0] == 401


# --- capture, verify, replay ---------------------------------------------------------------
def test_capture_tp2_shell_mhc_is_bit_exact_and_replays_exact(tp2_shell, tmp_path):
    out = tmp_path / "tp2"
    r, s = capture(tp2_shell, out)
    assert r.returncode == 0, r.stderr
    c = s["corpora"][0]
    assert s["ok"] and c["linked"] and c["cross_rank_exact"] and c["allreduce_exact"]
    assert c["mhc_exact"] and not c["rebased"] and c["mhc_max_ulp"] == 0
    assert c["inference"]["found"]
    assert s["armed_cycle_ms"][0] > 0 and s["write_ms"][0] > 0
    info = json.loads((out / "corpus.json").read_text())
    assert info["geometry"] == tp2_shell.health["geometry"] and info["collective"]["how"] == "inferred"
    assert replay_exact(out)["expected"] == "captured"

    again, s2 = capture(tp2_shell, out)  # the same folder: existing blobs are reused
    assert again.returncode == 0, again.stderr
    assert s2["blobs_reused"] > 0 and s2["corpora"][0]["mhc_exact"]


def test_capture_tp4_transformers_mhc_is_rebased_and_replays_exact(tp4_transformers, tmp_path):
    out = tmp_path / "tp4"
    r, s = capture(tp4_transformers, out)
    assert r.returncode == 0, r.stderr
    c = s["corpora"][0]
    assert s["ok"] and c["linked"] and c["cross_rank_exact"] and c["allreduce_exact"]
    assert not c["mhc_exact"] and c["mhc_max_ulp"] > 0 and c["rebased"]
    assert json.loads((out / "corpus.json").read_text())["rebased"] is True
    assert replay_exact(out)["expected"] == "rebased"


def test_several_cycles_give_one_corpus_each(tp4_transformers, tmp_path):
    r, s = capture(tp4_transformers, tmp_path / "many", "--cycles", 2, "--phase", "verify")
    assert r.returncode == 0, r.stderr
    assert [Path(c["corpus"]).name for c in s["corpora"]] == ["cycle-000", "cycle-001"]
    assert all(c["linked"] and c["cross_rank_exact"] for c in s["corpora"])
    assert s["geometry"]["draft_rows"] == 0


def test_wait_captures_live_traffic(tp2_shell, tmp_path):
    proc = subprocess.Popen([*SHELL, "capture", "--from-service", tp2_shell.url, "--token-file",
                             str(tp2_shell.token_file), "--out", str(tmp_path / "live"), "--wait", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while tp2_shell.get("/capture/status").get("state") != "pending":
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.05)
        tp2_shell.request("POST", "/generate", {"prompt": "live traffic", "max_new_tokens": 8}, token=None)
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["ok"]


# --- failures --------------------------------------------------------------------------------
def _one_line_error(r, code):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bad_input_is_one_line_and_exit_2(tmp_path, tp2_shell):
    token = tmp_path / "token"
    token.write_text("x\n")
    token.chmod(0o600)
    port = free_port()
    _one_line_error(shell("capture", "--from-service", f"http://127.0.0.1:{port}", "--token-file", token,
                          "--out", tmp_path / "o", "--ready-timeout", "0.5"), 2)
    _one_line_error(shell("capture", "--from-service", "http://10.1.2.3:80", "--token-file", token,
                          "--out", tmp_path / "o"), 2)
    _one_line_error(shell("capture", "--from-service", tp2_shell.url, "--token-file", tmp_path / "missing",
                          "--out", tmp_path / "o"), 2)
    _one_line_error(shell("capture", "--from-service", tp2_shell.url, "--token-file", token,
                          "--out", tmp_path / "o"), 2)  # wrong token: 401
    token.write_text(tp2_shell.token)
    token.chmod(0o644)
    _one_line_error(shell("capture", "--from-service", tp2_shell.url, "--token-file", token,
                          "--out", tmp_path / "o"), 2)
    _one_line_error(shell("serve-reference", "--tp", 3, "--port", 0), 2)
    _one_line_error(shell("serve-reference", "--tp", 2, "--port", tp2_shell.port), 2)


def test_a_geometry_the_service_does_not_run_fails_clearly(tp2_shell, tmp_path):
    r = shell("capture", "--from-service", tp2_shell.url, "--token-file", tp2_shell.token_file,
              "--out", tmp_path / "g", "--verify-rows", 3)
    _one_line_error(r, 1)
    assert "geometry" in r.stderr and "[2, 64]" in r.stderr
    assert not (tmp_path / "g" / "corpus.json").exists()


def test_killing_a_rank_mid_capture_leaves_nothing_verify_accepts(tmp_path, tp2_shell):
    out = tmp_path / "killed"
    folders = [out / f"cycle-{k:03d}" for k in range(3)]
    victim = Service(tmp_path, 2, "transformers")
    try:
        r, _ = capture(victim, out, "--cycles", 3)  # complete corpora first: the killed capture must void them
        assert r.returncode == 0 and all((f / "corpus.json").exists() for f in folders)
        pids = victim.get("/capture/info")["pids"]
        victim.request("POST", "/capture/arm", {"geometry": victim.health["geometry"], "cycles": 3, "out": str(out)})
        assert not any((f / "corpus.json").exists() for f in folders)
        threading.Thread(target=lambda: _quietly(victim.request, "POST", "/generate",
                                                 {"prompt": "kill", "max_new_tokens": 40}, token=None),
                         daemon=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st = victim.get("/capture/status")
            if int(st["ranks"].get("1", {}).get("written", 0)) >= 1:
                break
            time.sleep(0.002)
        assert st["state"] in ("capturing", "armed"), st
        os.kill(pids[1], signal.SIGKILL)
        victim.proc.wait(30)
    finally:
        victim.stop()
    for f in folders:
        assert not (f / "corpus.json").exists()
        _one_line_error(shell("verify", f), 2)
        _one_line_error(shell("replay", f, "--driver", "cpu", "--epochs", 1), 2)
        blobs = BlobStore(f)
        for d in blobs.digests():  # every blob there is whole: the store's own checks pass
            declared = zstandard.get_frame_parameters(blobs.path(d).read_bytes()).content_size
            assert digest_of(blobs.get(d, declared)) == d
    before = set(BlobStore(folders[0]).digests())
    r, s = capture(tp2_shell, out, "--cycles", 3)
    assert r.returncode == 0, r.stderr
    assert s["ok"] and s["blobs_reused"] > 0 and before <= set(BlobStore(folders[0]).digests())


def _quietly(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception:
        pass
