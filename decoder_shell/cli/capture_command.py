"""`shell capture --from-service URL`: arm, drive (or wait for) traffic, follow every rank, verify."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..corpus.store import Corpus
from ..corpus.verify import mhc_parity, verify
from ..geometry import Geometry, preset
from ..capture.client import ServiceClient, parse_service_url
from ..capture.errors import CaptureError, ServiceUnreachable, UsageError
from ..capture.token import default_token_file, read_token
from .render_verify import parity_table

POLL_S = 0.1
FINISHED = ("done", "error", "cancelled")


def capture_geometry(info: dict, args) -> Geometry:
    """The service's declared geometry with the user's overrides, or one built from --preset."""
    if args.preset:
        g = preset(args.preset, tp=int(info["ranks"]), verify_rows=args.verify_rows or 2,
                   draft_rows=1 if args.draft_rows is None else args.draft_rows,
                   reduce_dtype=args.reduce_dtype or "bfloat16")
    elif info.get("geometry"):
        g = Geometry.from_json(info["geometry"])
        if args.verify_rows is not None:
            g = replace(g, verify_rows=args.verify_rows)
        if args.draft_rows is not None:
            g = replace(g, draft_rows=args.draft_rows)
        if args.reduce_dtype:
            g = replace(g, reduce_dtype=args.reduce_dtype)
    else:
        raise UsageError("the service declares no geometry; pass --preset (and --verify-rows/--draft-rows)")
    if args.phase == "verify":
        g = replace(g, draft_rows=0)
    if g.moe is not None and g.draft_rows:
        raise UsageError(f"capture does not record MoE draft commands yet (preset {g.preset}); "
                         f"capture with --phase verify or a preset without MoE")
    return g


def cmd_capture(args, console: Console) -> int:
    if args.cycles < 1:
        raise UsageError("--cycles must be at least 1")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if not 0 <= args.ready_timeout <= 24 * 3600:
        raise UsageError("--ready-timeout must be between 0 and 86400 seconds")
    base, port = parse_service_url(args.from_service)
    err = Console(stderr=True, highlight=False)
    spin = err.is_terminal and not args.json and not getattr(args, "quiet", False)
    token_file = Path(args.token_file) if args.token_file else default_token_file(port)
    token = wait_until_ready(base, port, token_file, args.ready_timeout, err if spin else None)
    client = ServiceClient(base, token)
    info = client.request("GET", "/capture/info")
    g = capture_geometry(info, args)
    out = Path(args.out).expanduser().resolve()
    status = client.request("POST", "/capture/arm", {"geometry": g.to_json(), "cycles": args.cycles, "out": str(out),
                                                    "replace": bool(args.replace)})
    capture_id = status["capture"]
    driver = None if args.wait else _Driver(client, args.prompt, args.cycles, g)
    try:
        status = _follow(client, capture_id, g, args, Console(stderr=True, highlight=False), driver)
    except KeyboardInterrupt:
        client.request("POST", "/capture/disarm", {})
        raise
    if status["state"] != "done":
        raise CaptureError(f"capture {capture_id} {status['state']}: {status.get('error') or 'no reason given'}")
    summary = _verify_all(status, g)
    if args.json:
        import json
        print(json.dumps(summary, indent=1, sort_keys=True, default=str))
    else:
        _render(summary, console)
    return 0 if summary["ok"] else 1


def wait_until_ready(base: str, port: int, token_file: Path, timeout: float, err: Console | None) -> str:
    """Wait (with a spinner on a terminal) until something listens on the service's port and its
    token file exists, so `capture` right after `serve-reference &` does not race its start-up;
    returns the token. Nothing listening after `timeout` seconds is `connection refused`."""
    from urllib.parse import urlsplit
    host = urlsplit(base).hostname
    deadline = time.monotonic() + timeout
    status = err.status(f"waiting for the service at {base} (up to {timeout:g} s)") if err else nullcontext()
    with status:
        while True:
            try:
                with socket.create_connection((host, port), timeout=2.0):
                    break
            except ConnectionRefusedError:
                reason = "connection refused"
            except OSError as e:
                reason = e.strerror or str(e)
            if time.monotonic() >= deadline:
                raise ServiceUnreachable(f"cannot reach {base}: {reason} (waited {timeout:g} s, see --ready-timeout; "
                                         "is the service running?)")
            time.sleep(0.2)
        while not token_file.exists() and time.monotonic() < deadline and not _answers(base):
            time.sleep(0.2)
    return read_token(token_file)


def _answers(base: str) -> bool:
    """Whether the service already answers HTTP: it writes its token file before it serves, so a
    missing file will not appear any more (wrong --token-file) and waiting longer is pointless."""
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(base + "/capture/info", timeout=1.0):
            return True
    except urllib.error.HTTPError:
        return True  # 401 without a token: up and serving
    except (urllib.error.URLError, OSError, ValueError):
        return False


class _Driver:
    """Sends generate requests until the capture no longer needs traffic (at most a few)."""

    def __init__(self, client: ServiceClient, prompt: str, cycles: int, g: Geometry):
        self.client = client
        self.body = {"prompt": prompt, "max_new_tokens": 1 + (cycles + 2) * g.verify_rows}
        self.needed = threading.Event()
        self.needed.set()
        self.error = ""
        threading.Thread(target=self._run, daemon=True, name="capture-driver").start()

    def _run(self):
        for _ in range(4):
            if not self.needed.is_set():
                return
            try:
                self.client.request("POST", "/generate", self.body, timeout=600)
            except ServiceUnreachable as e:
                self.error = (f"{self.client.base} has no /generate route (a plugin's own control endpoint?); "
                              "pass --wait and send traffic to the service" if "HTTP 404" in str(e) else str(e))
                return


def _follow(client: ServiceClient, capture_id: str, g: Geometry, args, err: Console, driver) -> dict:
    total = g.ranks * len(g.boundaries()) * args.cycles
    deadline = time.monotonic() + args.timeout
    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn())
    quiet = args.json or getattr(args, "quiet", False) or not err.is_terminal
    with Progress(*columns, console=err, transient=False, disable=quiet) as bar:
        task = bar.add_task("armed, waiting for the next cycle", total=total)
        while True:
            try:
                s = client.request("GET", "/capture/status")
            except ServiceUnreachable as e:
                raise CaptureError(f"capture {capture_id}: the service went away during the capture ({e}); "
                                   "the target folders are unchanged") from None
            if s.get("capture") != capture_id:
                raise CaptureError(f"capture {capture_id} was replaced by another arm request")
            written = sum(int(r.get("written", 0)) for r in s.get("ranks", {}).values())
            ranks_done = sum(r.get("state") == "done" for r in s.get("ranks", {}).values())
            bar.update(task, completed=written,
                       description=f"{s['state']}: {ranks_done}/{g.ranks} ranks done")
            if s["state"] in FINISHED:
                if driver:
                    driver.needed.clear()
                return s
            if driver and driver.error:
                client.request("POST", "/capture/disarm", {})
                raise ServiceUnreachable(driver.error)
            if time.monotonic() > deadline:
                client.request("POST", "/capture/disarm", {})
                raise CaptureError(f"capture {capture_id} still {s['state']} after {args.timeout:g} s "
                                   f"({written}/{total} rank-boundaries written); disarmed")
            time.sleep(POLL_S)


def _verify_all(status: dict, g: Geometry) -> dict:
    """Verify each published corpus again, here (the service verified and recorded its parity, rebased
    when the mHC is not the contract's, before it published it)."""
    corpora = []
    for folder, inference in zip(status["corpora"], status.get("inference") or [{}] * len(status["corpora"])):
        c = Corpus.open(Path(folder))
        rep = verify(c)
        mhc_exact, mhc_max_ulp = mhc_parity(rep["parity"])
        ar = rep["parity"].get("allreduce", {})
        corpora.append({
            "corpus": folder, "linked": rep["linked"], "cross_rank_exact": rep["cross_rank_exact"],
            "contract": rep["contract"], "inference": inference,
            "allreduce_exact": ar.get("exact") == ar.get("boundaries"),
            "mhc_exact": mhc_exact, "mhc_max_ulp": mhc_max_ulp,
            "parity": rep["parity"], "rebased": c.info.rebased, "counts": c.info.counts,
            "broken_links": rep["broken_links"], "cross_rank_mismatch": rep["cross_rank_mismatch"]})
    ranks = status.get("ranks", {})
    cycle_ms = [max(r["cycle_ms"][k] for r in ranks.values()) for k in range(len(status["corpora"]))] if ranks else []
    write_ms = [max(r["write_ms"][k] for r in ranks.values()) for k in range(len(status["corpora"]))] if ranks else []
    ok = all(c["linked"] and c["cross_rank_exact"] and c["allreduce_exact"] and c["inference"].get("found", True)
             for c in corpora)
    return {"ok": ok, "capture": status["capture"], "geometry": g.to_json(), "start_cycle": status.get("start_cycle"),
            "corpora": corpora, "armed_cycle_ms": cycle_ms, "write_ms": write_ms,
            "blobs_new": sum(int(r.get("blobs_new", 0)) for r in ranks.values()),
            "blobs_reused": sum(int(r.get("blobs_reused", 0)) for r in ranks.values())}


def _render(s: dict, console: Console) -> None:
    """The same style as `shell verify`: titled tables, MiB in text (the JSON keeps bytes)."""
    g = s["geometry"]
    console.print(f"captured {len(s['corpora'])} cycle(s) from cycle {s['start_cycle']}: TP{g['ranks']}, "
                  f"D={g['hidden']}, layers={g['layers']}, verify M={g['verify_rows']}, draft M={g['draft_rows']}")
    folders = sorted({str(Path(c["corpus"]).parent) for c in s["corpora"]}) if len(s["corpora"]) > 1 else \
        [c["corpus"] for c in s["corpora"]]
    console.print("into " + ", ".join(folders))
    t = Table(title="cycles captured (times at the slowest rank)")
    for c in ("cycle", "armed ms", "write ms", "linked", "cross-rank", "MiB ref", "MiB stored"):
        t.add_column(c, justify="left" if c == "cycle" else "right")
    for k, c in enumerate(s["corpora"]):
        n = c["counts"]
        t.add_row(Path(c["corpus"]).name, f"{s['armed_cycle_ms'][k]:.1f}", f"{s['write_ms'][k]:.1f}",
                  _yes(c["linked"]), _yes(c["cross_rank_exact"]), f"{n.get('referenced_bytes', 0) / 2**20:.2f}",
                  f"{n.get('stored_bytes', 0) / 2**20:.2f}")
    console.print(t)
    console.print(f"blobs: {s['blobs_new']} written, {s['blobs_reused']} reused (a tensor already in the store, "
                  "such as a weight replicated across ranks or an op's output that the next op reads, is stored once)")
    for c in s["corpora"]:
        inf = c["inference"]
        console.print(f"collective contract: {inf.get('description', c['contract'])}")
        console.print(parity_table(c["parity"], f"contract parity of {Path(c['corpus']).name}"))
        if c["mhc_exact"]:
            console.print("mHC parity: bit-exact with the contract (replay expects the captured outputs)")
        else:
            console.print(f"mHC parity: up to {c['mhc_max_ulp']:g} ulp from the contract; corpus marked "
                          "[bold]rebased[/bold] (replay expects the contract's outputs from the captured inputs)")
    console.print("verify: " + ("ok" if s["ok"] else "[red]FAILED[/red]"))


def _yes(v: bool) -> str:
    return "yes" if v else "[red]NO[/red]"
