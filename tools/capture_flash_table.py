"""The summary table of tools/gpu_capture_flash.sh: what the full-geometry capture holds (next to the
seed's artifact) and how its replay compares with the synthetic corpus of the same geometry.

Usage: python3 tools/capture_flash_table.py OUT   (reads the JSON and logs the script left in OUT)
Exit 0 when every step succeeded and both replays were exact on every epoch, else 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

SEED = {"manifests": 688, "blobs": 1030, "mib": 150}  # the seed's artifact: verify phase, TP4, M=2


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _replay(d: dict) -> tuple[str, str, str]:
    s = d.get("summary") or {}
    exact = " + ".join(f"{s[k]['exact']}/{s[k]['epochs']}" for k in ("graph", "changed") if k in s) or "-"
    t = (d.get("timing") or {}).get("cycle_ms") or {}
    med = f"{t['median']:.3f}" if "median" in t else "-"
    p90 = f"{t['p90']:.3f}" if "p90" in t else "-"
    return exact, med, p90


def main(out: Path) -> int:
    steps = {}
    for line in (out / "steps.txt").read_text().splitlines() if (out / "steps.txt").exists() else []:
        name, rc, secs = line.split()
        steps[name] = (int(rc), int(secs))
    ready = next((ln for ln in (out / "serve.log").read_text().splitlines() if ln.startswith("serving http")), "") \
        if (out / "serve.log").exists() else ""
    cap, ins = _load(out / "capture.json"), _load(out / "inspect.json")
    rc_, rs = _load(out / "replay-capture.json"), _load(out / "replay-synth.json")
    gate = _load(out / "gate-delete-mhc.json")
    con = Console(width=110)

    t = Table(title="steps")
    for c in ("step", "rc", "seconds"):
        t.add_column(c, justify="right")
    for name, (rc, secs) in steps.items():
        t.add_row(name, str(rc), str(secs))
    con.print(t)
    if ready:
        con.print(ready)

    c0 = (cap.get("corpora") or [{}])[0]
    per_op = ins.get("manifests_per_op") or {}
    g = ins.get("geometry") or {}
    t = Table(title=f"captured corpus ({g.get('preset')}, D={g.get('hidden')}, layers {g.get('layers')}, "
                    f"TP{g.get('ranks')}, draft M={g.get('draft_rows')} + verify M={g.get('verify_rows')}) "
                    "next to the seed's artifact")
    for c in ("", "captured", "seed's artifact (verify phase only)"):
        t.add_column(c, justify="right")
    t.add_row("manifests", str(ins.get("manifests", "-")), f"{SEED['manifests']} = 4 x (87 + 85)")
    t.add_row("manifests per op", ", ".join(f"{k} {v}" for k, v in sorted(per_op.items())) or "-", "")
    t.add_row("unique blobs", str(ins.get("unique_blobs", "-")), str(SEED["blobs"]))
    t.add_row("MiB stored", f"{ins['stored_bytes'] / 2**20:.1f}" if "stored_bytes" in ins else "-", str(SEED["mib"]))
    t.add_row("MiB referenced", f"{ins['referenced_bytes'] / 2**20:.1f}" if "referenced_bytes" in ins else "-", "")
    t.add_row("armed cycle / write ms", " / ".join(f"{(cap.get(k) or [0])[0]:.0f}" for k in ("armed_cycle_ms", "write_ms"))
              if cap else "-", "")
    t.add_row("linked, cross-rank exact", f"{c0.get('linked')}, {c0.get('cross_rank_exact')}", "")
    t.add_row("contract", str(ins.get("contract", "-")), "")
    t.add_row("mHC", "rebased" if ins.get("rebased") else "captured outputs", "")
    con.print(t)

    t = Table(title=f"replay on {rc_.get('driver', '?')} (ms per cycle, slowest rank)")
    for c in ("corpus", "exact (graph + changed)", "median", "p90"):
        t.add_column(c, justify="right")
    t.add_row("captured", *_replay(rc_))
    t.add_row("synthetic, same geometry", *_replay(rs))
    con.print(t)
    if gate:
        con.print(f"gate --delete mhc (bound): verdict {gate.get('verdict')}, saved "
                  f"{(gate.get('saved_ms') or {}).get('median', float('nan')):.3f} ms median")
    ok = (bool(steps) and all(rc == 0 for name, (rc, _) in steps.items() if not name.startswith("gate"))
          and rc_.get("exact") is True and rs.get("exact") is True)
    con.print("capture + replay: " + ("ok" if ok else "FAILED (see the logs in " + str(out) + ")"))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 tools/capture_flash_table.py OUT", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1])))
