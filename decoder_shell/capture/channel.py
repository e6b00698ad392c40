"""Rank 0 <-> rank messages: arm and disarm go out, acknowledgements and progress come back.

Rank 0 listens on loopback with a random key (multiprocessing.connection authenticates both ends
with it) and leaves address and key in the run folder (mode 0700, files 0600). Every other rank
connects once at start-up from a daemon thread and then sleeps in recv(): an idle service pays
nothing for the channel. A rank whose connection drops is reported to rank 0 as lost.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from multiprocessing.connection import Client, Listener
from pathlib import Path

from ..atomic import write_atomic
from .control import LOOPBACK

CHANNEL_FILE = "channel.json"


class RankHub:
    """Rank 0's end: one connection per other rank."""

    def __init__(self, run_dir: Path, world: int, on_message, on_lost):
        self.world = world
        self.on_message = on_message
        self.on_lost = on_lost
        self.key = secrets.token_bytes(32)
        self.listener = Listener((LOOPBACK, 0), authkey=self.key)
        self.conns: dict[int, object] = {}
        self.pids: dict[int, int] = {0: os.getpid()}
        self.connected = threading.Condition()
        self._locks: dict[int, threading.Lock] = {}
        host, port = self.listener.address
        write_atomic(Path(run_dir) / CHANNEL_FILE,
                     json.dumps({"host": host, "port": port, "key": self.key.hex()}).encode())
        threading.Thread(target=self._accept, name="decoder-shell-hub", daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn = self.listener.accept()
            except Exception:  # a client with a stale key, or one that left mid-handshake
                time.sleep(0.05)
                continue
            try:
                hello = conn.recv()
            except Exception:
                conn.close()
                continue
            rank = int(hello.get("rank", -1))
            if not 0 < rank < self.world:
                conn.close()
                continue
            with self.connected:
                self.conns[rank] = conn
                self.pids[rank] = int(hello.get("pid", 0))
                self._locks[rank] = threading.Lock()
                self.connected.notify_all()
            threading.Thread(target=self._read, args=(rank, conn), daemon=True,
                             name=f"decoder-shell-hub-r{rank}").start()

    def _read(self, rank: int, conn):
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                with self.connected:
                    if self.conns.get(rank) is conn:
                        del self.conns[rank]
                self.on_lost(rank)
                return
            self.on_message(rank, msg)

    def wait_connected(self, timeout: float) -> list[int]:
        """Ranks still missing after `timeout` seconds (empty when all are connected)."""
        deadline = time.monotonic() + timeout
        with self.connected:
            while True:
                missing = [r for r in range(1, self.world) if r not in self.conns]
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    return missing
                self.connected.wait(left)

    def send(self, rank: int, msg: dict) -> bool:
        conn = self.conns.get(rank)
        if conn is None:
            return False
        try:
            with self._locks[rank]:
                conn.send(msg)
            return True
        except OSError:
            return False


class RankLink:
    """A non-zero rank's end: connects to rank 0 in the background, then waits for messages."""

    def __init__(self, run_dir: Path, rank: int, on_message):
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.on_message = on_message
        self.conn = None
        self.lock = threading.Lock()
        self.ready = threading.Event()
        threading.Thread(target=self._run, name="decoder-shell-link", daemon=True).start()

    def _connect(self):
        while True:
            try:
                d = json.loads((self.run_dir / CHANNEL_FILE).read_text())
                conn = Client((d["host"], int(d["port"])), authkey=bytes.fromhex(d["key"]))
                conn.send({"rank": self.rank, "pid": os.getpid()})
                return conn
            except Exception:  # not written yet, stale, or rank 0 not listening yet
                time.sleep(0.1)

    def _run(self):
        self.conn = self._connect()
        self.ready.set()
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                return
            self.on_message(msg)

    def send(self, msg: dict) -> bool:
        if not self.ready.is_set():
            return False
        try:
            with self.lock:
                self.conn.send(msg)
            return True
        except OSError:
            return False
