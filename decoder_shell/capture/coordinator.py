"""Rank 0's coordinator: accepts an arm, starts it on every rank at one cycle, gathers progress, and
publishes each corpus (with the inferred collective contract and its verified parity) once every
rank has written its part.

Arming takes each target folder's writer lock and a staging folder beside it (corpus/publish.py);
the ranks write into the staging folders, and the target is swapped only when the staged corpus is
complete and verified. A capture that stops half-way (a rank killed, a timeout, a disarm) drops the
staging folders and leaves whatever the targets held before untouched. A non-empty target needs
`replace` in the arm request; the blobs it holds are linked into the new corpus, not written again.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from pathlib import Path

from ..contracts.allreduce import RingContract
from ..corpus.infer import infer_corpus
from ..corpus.publish import Staging
from ..corpus.store import Corpus, CorpusInfo
from ..corpus.verify import record_parity, verify
from ..errors import ShellError
from ..geometry import Geometry
from .plugin import Arm

ACK_TIMEOUT_S = 30.0
BUSY = ("pending", "armed", "capturing", "finalizing")
MAX_CYCLES = 64


class Coordinator:
    def __init__(self, plugin, *, service: dict | None = None, geometry: Geometry | None = None):
        self.plugin = plugin
        self.service = dict(service or {})
        self.geometry = geometry
        self.lock = threading.Condition()
        self.current: dict | None = None
        self.acks: set[int] = set()
        self.lost: set[int] = set()
        self.staging: list[Staging] = []

    # --- HTTP side ---------------------------------------------------------------------------
    def info(self) -> dict:
        hub = self.plugin.hub
        return {"service": self.service, "ranks": self.plugin.world,
                "pids": [hub.pids.get(r) for r in range(self.plugin.world)],
                "geometry": self.geometry.to_json() if self.geometry else None,
                "state": self.current["state"] if self.current else "idle", "lost_ranks": sorted(self.lost)}

    def status(self) -> dict:
        with self.lock:
            if self.current is None:
                return {"state": "idle"}
            s = dict(self.current)
            s["ranks"] = {str(r): dict(p) for r, p in self.current["ranks"].items()}
            return s

    def arm(self, req: dict) -> tuple[int, dict]:
        """Accept one capture at a time: the busy check, the folder locks and the new state are one
        step under the coordinator's lock, so of two concurrent arm requests exactly one gets 202."""
        with self.lock:
            if self.current and self.current["state"] in BUSY:
                return 409, {"error": f"capture {self.current['capture']} is {self.current['state']}; "
                                      "wait for it or POST /capture/disarm"}
            try:
                arm = self._parse(req)
                self.staging = self._prepare(arm, req.get("replace") is True)
            except (ShellError, ValueError, TypeError, KeyError) as e:
                return 400, {"error": str(e).strip("'\"")}
            self.acks = set()
            self.current = {"capture": arm.capture, "state": "pending", "cycles": arm.cycles,
                            "corpora": arm.targets, "geometry": arm.geometry.to_json(), "start_cycle": None,
                            "ranks": {}, "error": "", "inference": [], "armed_at": time.time()}
            self.plugin._pending = arm
            return 202, self.status()

    def disarm(self) -> tuple[int, dict]:
        with self.lock:
            cur = self.current
            if not cur or cur["state"] not in BUSY:
                return 200, self.status()
            self.plugin._pending = None
            self.plugin._arm = None
            cur["state"] = "cancelled"
            cur["error"] = "disarmed on request"
            self._abandon()
        for r in range(1, self.plugin.world):
            self.plugin.hub.send(r, {"type": "disarm", "capture": cur["capture"]})
        return 200, self.status()

    def _parse(self, req: dict) -> Arm:
        g = Geometry.from_json(req["geometry"])
        if g.ranks != self.plugin.world:
            raise ValueError(f"the service runs {self.plugin.world} ranks, the geometry says {g.ranks}")
        refusal = self.plugin.arm_check(g) if self.plugin.arm_check else None
        if refusal:
            raise ValueError(refusal)
        cycles = req.get("cycles", 1)
        if not isinstance(cycles, int) or not 1 <= cycles <= MAX_CYCLES:
            raise ValueError(f"cycles must be an integer from 1 to {MAX_CYCLES}")
        out = req.get("out")
        if not isinstance(out, str) or not os.path.isabs(out):
            raise ValueError("out must be an absolute folder path")
        targets = [out] if cycles == 1 else [os.path.join(out, f"cycle-{k:03d}") for k in range(cycles)]
        return Arm(secrets.token_hex(6), g, cycles, list(targets), targets=list(targets))

    @staticmethod
    def _prepare(arm: Arm, replace: bool) -> list[Staging]:
        """Lock each target and give the ranks a staging folder beside it; nothing of a target changes."""
        staging: list[Staging] = []
        try:
            for target in arm.targets:
                s = Staging(Path(target), replace)
                s.begin()
                staging.append(s)
        except BaseException:
            for s in staging:
                s.abandon()
            raise
        arm.corpora = [str(s.dir) for s in staging]
        return staging

    def _abandon(self) -> None:
        """Drop the staging folders of a capture that will not finish (the targets stay as they were)."""
        staging, self.staging = self.staging, []
        for s in staging:
            s.abandon()

    # --- rank 0's main thread, at the start of a cycle ---------------------------------------
    def begin(self, start: int) -> None:
        """Arm every rank from cycle `start`; returns once all acknowledged (or the arm failed)."""
        with self.lock:
            arm = self.plugin._pending
            self.plugin._pending = None
            if arm is None or not self.current or self.current["capture"] != arm.capture:
                return
            arm.start = start
        missing = self.plugin.hub.wait_connected(ACK_TIMEOUT_S)
        if missing:
            self._fail(f"rank(s) {missing} never connected to rank 0's capture channel")
            return
        for r in range(1, self.plugin.world):
            self.plugin.hub.send(r, arm.to_message())
        deadline = time.monotonic() + ACK_TIMEOUT_S
        with self.lock:
            while len(self.acks) < self.plugin.world - 1 and time.monotonic() < deadline:
                self.lock.wait(deadline - time.monotonic())
            if len(self.acks) < self.plugin.world - 1:
                waiting = sorted(set(range(1, self.plugin.world)) - self.acks)
                self.current["state"] = "error"
                self.current["error"] = f"rank(s) {waiting} did not acknowledge the arm"
                self._abandon()
            else:
                self.current["state"] = "armed"
                self.current["start_cycle"] = start
                self.plugin._arm = arm
        if self.current["state"] == "error":
            for r in range(1, self.plugin.world):
                self.plugin.hub.send(r, {"type": "disarm", "capture": arm.capture})

    # --- messages from ranks -----------------------------------------------------------------
    def on_message(self, rank: int, msg: dict) -> None:
        finalize = False
        with self.lock:
            cur = self.current
            if not cur or msg.get("capture") != cur["capture"]:
                return
            if msg.get("type") == "ack":
                self.acks.add(rank)
                self.lock.notify_all()
                return
            if msg.get("type") != "progress" or cur["state"] not in BUSY:
                return
            cur["ranks"][rank] = {k: v for k, v in msg.items() if k not in ("type", "capture")}
            if msg["state"] == "error":
                cur["state"] = "error"
                cur["error"] = f"rank {rank}: {msg['error']}"
                self._abandon()
            elif cur["state"] == "armed":
                cur["state"] = "capturing"
            states = [cur["ranks"].get(r, {}).get("state") for r in range(self.plugin.world)]
            if cur["state"] != "error" and all(s == "done" for s in states):
                cur["state"] = "finalizing"
                finalize = True
        if finalize:
            threading.Thread(target=self._finalize, args=(cur,), name="decoder-shell-finalize", daemon=True).start()

    def on_lost(self, rank: int) -> None:
        with self.lock:
            self.lost.add(rank)
            cur = self.current
            if cur and cur["state"] in BUSY and cur["state"] != "finalizing":
                cur["state"] = "error"
                cur["error"] = (f"rank {rank} disconnected during the capture (did its process exit?); "
                                "the target folders are unchanged")
                self.plugin._arm = None
                self.plugin._pending = None
                self._abandon()
            self.lock.notify_all()

    def _fail(self, message: str) -> None:
        with self.lock:
            if self.current:
                self.current["state"] = "error"
                self.current["error"] = message
                self._abandon()

    def _probes(self, cur: dict) -> list:
        """Rank 0's probe outputs, kept only if every rank got the same bits (an all-reduce does)."""
        ranks = [cur["ranks"].get(r, {}).get("probes", []) for r in range(self.plugin.world)]
        return ranks[0] if all(p == ranks[0] for p in ranks) else []

    # --- the last step -------------------------------------------------------------------------
    def _finalize(self, cur: dict) -> None:
        """In each staging folder: infer the collective contract, write corpus.json, verify and record
        the parity; then publish every corpus (each one atomic swap)."""
        g = Geometry.from_json(cur["geometry"])
        staging = list(self.staging)
        try:
            results = []
            probes = self._probes(cur)
            for s in staging:
                inference = infer_corpus(Corpus(s.dir, CorpusInfo(g, collective={"probes": probes})))
                source = {"kind": "service", **self.service, "capture": cur["capture"],
                          "captured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(cur["armed_at"]))}
                c = Corpus.create(s.dir, g, source, RingContract(), how="")
                c.info.collective = inference.collective(RingContract(), probes)
                c.finalize()
                record_parity(c, verify(Corpus.open(s.dir)))
                results.append(inference.to_json())
            with self.lock:
                if cur["state"] != "finalizing":
                    return  # disarmed meanwhile: its staging is gone
                for s in staging:
                    s.publish()
                self.staging = []
                cur["inference"] = results
                cur["state"] = "done"
        except Exception as e:
            with self.lock:
                if cur["state"] == "finalizing":
                    cur["state"] = "error"
                    cur["error"] = f"finalizing the corpus failed (the target folders are unchanged): {e}"
                    self._abandon()
