"""What this installation is and where it runs: version, commit, drivers, host.

`shell --version` prints it, and every result JSON (replay, gate, verify) carries it, so that a
number read later says which build, which machine and which device produced it.
"""

from __future__ import annotations

import json
import os
import re
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

DIST = "decoder-shell"


def version() -> str:
    """The installed distribution's version (pyproject.toml's, as `decoder_shell.__version__`)."""
    try:
        return metadata.version(DIST)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def commit() -> str | None:
    """The git commit this installation was built from: DECODER_SHELL_COMMIT where a copy of the tree
    travels without its own git metadata (set by whoever copied it), else pip's record of a VCS install,
    else the checkout the package is imported from (an editable install or PYTHONPATH), with "+dirty"
    where the working tree differs from that commit (so a result never names a commit it did not run)."""
    pinned = os.environ.get("DECODER_SHELL_COMMIT", "").strip()
    if re.fullmatch(r"[0-9a-f]{7,40}", pinned):
        return pinned[:12]
    try:
        raw = metadata.distribution(DIST).read_text("direct_url.json")
        vcs = json.loads(raw or "{}").get("vcs_info", {})
        if vcs.get("commit_id"):
            return vcs["commit_id"][:12]
    except (metadata.PackageNotFoundError, ValueError):
        pass
    here = Path(__file__).resolve().parent
    try:
        p = subprocess.run(["git", "-C", str(here), "rev-parse", "--show-toplevel", "--short=12", "HEAD"],
                           capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = p.stdout.split()
    if p.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != here.parent:
        return None  # not a checkout of this project (an installed copy inside some other repository)
    try:
        d = subprocess.run(["git", "-C", lines[0], "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return lines[1] + "+unknown"
    return lines[1] + ("+dirty" if d.returncode != 0 or d.stdout.strip() else "")


def version_text(drivers: dict[str, str]) -> str:
    """`shell --version`: version and commit, Python and platform, and each driver's state
    (`drivers.probe()`: name -> "available: ..." or "unavailable: why")."""
    c = commit()
    lines = [f"decoder-shell {version()}" + (f" (commit {c})" if c else ""),
             f"python {platform.python_version()} on {platform.system()} {platform.machine()}"]
    lines += [f"driver {name:<11} {state}" for name, state in drivers.items()]
    return "\n".join(lines)


def environment(driver=None) -> dict:
    """The provenance block of every result: tool, host, device and runtime versions, time."""
    import numpy as np
    env = {"tool": {"name": DIST, "version": version(), "commit": commit()},
           "host": {"name": platform.node(), "os": f"{platform.system()} {platform.release()}",
                    "machine": platform.machine(), "python": platform.python_version(), "numpy": np.__version__},
           "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "argv": sys.argv[1:]}
    if driver is not None:
        versions = getattr(driver, "versions", None)
        env["device"] = {"driver": driver.name, "description": driver.describe(), **(versions() if versions else {})}
    return env
