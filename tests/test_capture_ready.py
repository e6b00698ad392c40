"""`shell capture` waits for the service (--ready-timeout) and says `connection refused` when nothing
listens, instead of failing on a token file that a starting service has not written yet."""

from __future__ import annotations

import socket
import time

from conftest import assert_one_line_error, run_shell


def test_nothing_listening_is_connection_refused(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connecting is refused
        t0 = time.monotonic()
        r = run_shell("capture", "--from-service", f"http://127.0.0.1:{port}", "--out", tmp_path / "o",
                      "--ready-timeout", "1.5", "--token-file", tmp_path / "token")
        took = time.monotonic() - t0
    line = assert_one_line_error(r, 2, f"http://127.0.0.1:{port}")
    assert "connection refused" in line and "waited 1.5 s" in line and "--ready-timeout" in line
    assert 1.5 <= took < 20
    assert not (tmp_path / "o").exists()


def test_a_listener_without_its_token_file_is_waited_for_then_named(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        r = run_shell("capture", "--from-service", f"http://127.0.0.1:{port}", "--out", tmp_path / "o",
                      "--ready-timeout", "1", "--token-file", tmp_path / "token")
        took = time.monotonic() - t0
    line = assert_one_line_error(r, 2, tmp_path / "token")
    assert "does not exist" in line and took >= 1


def test_ready_timeout_must_be_sane(tmp_path):
    r = run_shell("capture", "--from-service", "http://127.0.0.1:9", "--out", tmp_path / "o", "--ready-timeout", "-1")
    assert "--ready-timeout" in assert_one_line_error(r, 2)
