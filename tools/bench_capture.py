"""Capture overhead on the reference service.

Disarmed: two services with the same TP degree, seed and mHC, one with the capture plugin installed
(disarmed), one without (--no-capture), get the same generate request in alternation (A B, B A, ...),
after a warm-up. Reported: median latency of each, the median of the paired differences and its 95%
bootstrap interval. Armed: the installed service is armed for one cycle; reported are the slowest
rank's armed cycle time, its write time, and the mean disarmed cycle time for comparison.

    python tools/bench_capture.py --tp 2 --requests 60
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

SHELL = [sys.executable, "-m", "decoder_shell.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    def __init__(self, folder: Path, tp: int, mhc: str, capture: bool):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token_file = folder / f"token-{self.port}"
        cmd = [*SHELL, "serve-reference", "--tp", str(tp), "--port", str(self.port), "--mhc", mhc,
               "--backend", "gloo", "--token-file", str(self.token_file)] + ([] if capture else ["--no-capture"])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 180
        while True:
            try:
                self.call("GET", "/health")
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit(f"service on {self.port} did not start")
                time.sleep(0.3)

    def call(self, method, path, body=None, auth=False):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        if auth:
            req.add_header("Authorization", "Bearer " + self.token_file.read_text().strip())
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def generate(self, body) -> tuple[float, dict]:
        t0 = time.perf_counter()
        r = self.call("POST", "/generate", body)
        return (time.perf_counter() - t0) * 1e3, r

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def bootstrap_median(x: np.ndarray, n: int = 5000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    meds = np.median(rng.choice(x, size=(n, len(x)), replace=True), axis=1)
    return float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--mhc", default="transformers", choices=("transformers", "shell"))
    ap.add_argument("--requests", type=int, default=60, help="generate requests per service (after warm-up)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    body = {"prompt": "Capture overhead, measured.", "max_new_tokens": args.max_new_tokens}
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as tmp:
        tmp = Path(tmp)
        plain = Service(tmp, args.tp, args.mhc, capture=False)
        installed = Service(tmp, args.tp, args.mhc, capture=True)
        try:
            for _ in range(args.warmup):
                plain.generate(body)
                installed.generate(body)
            a, b, cycles = [], [], []
            for i in range(args.requests):
                order = (plain, installed) if i % 2 == 0 else (installed, plain)
                for svc in order:
                    ms, r = svc.generate(body)
                    (a if svc is plain else b).append(ms)
                    if svc is installed:
                        cycles.append(r["seconds"] * 1e3 / max(r["cycles"], 1))
            a, b = np.array(a), np.array(b)
            diff = b - a
            lo, hi = bootstrap_median(diff)
            geometry = installed.call("GET", "/health")["geometry"]
            armed = installed.call("POST", "/capture/arm", {"geometry": geometry, "cycles": 1,
                                                             "out": str(tmp / "corpus")}, auth=True)
            armed_ms, _ = installed.generate(body)
            deadline = time.monotonic() + 120
            while (st := installed.call("GET", "/capture/status", auth=True))["state"] not in ("done", "error"):
                if time.monotonic() > deadline:
                    raise SystemExit("armed capture did not finish")
                time.sleep(0.05)
        finally:
            plain.stop()
            installed.stop()
    ranks = st["ranks"].values()
    result = {
        "date": time.strftime("%Y-%m-%d"), "tp": args.tp, "mhc": args.mhc, "requests": args.requests,
        "max_new_tokens": args.max_new_tokens, "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "not_installed_median_ms": float(np.median(a)), "installed_disarmed_median_ms": float(np.median(b)),
        "paired_diff_median_ms": float(np.median(diff)), "paired_diff_ci95_ms": [lo, hi],
        "disarmed_cycle_mean_ms": float(np.mean(cycles)),
        "armed_state": st["state"], "armed_capture": armed["capture"],
        "armed_cycle_ms": max(r["cycle_ms"][0] for r in ranks) if st["state"] == "done" else None,
        "armed_write_ms": max(r["write_ms"][0] for r in ranks) if st["state"] == "done" else None,
        "armed_generate_ms": armed_ms,
    }
    print(f"generate latency, {args.requests} interleaved requests each (TP{args.tp}, mhc {args.mhc}, "
          f"{args.max_new_tokens} new tokens):")
    print(f"  plugin not installed:        median {result['not_installed_median_ms']:8.2f} ms")
    print(f"  installed, disarmed:         median {result['installed_disarmed_median_ms']:8.2f} ms")
    print(f"  paired difference (B - A):   median {result['paired_diff_median_ms']:+8.2f} ms, "
          f"95% CI [{lo:+.2f}, {hi:+.2f}] ms")
    print(f"armed: one cycle captured in {result['armed_cycle_ms']:.1f} ms (slowest rank; disarmed cycle "
          f"{result['disarmed_cycle_mean_ms']:.1f} ms), written in {result['armed_write_ms']:.1f} ms")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
