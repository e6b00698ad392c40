"""Data shipped inside the package: the tiny corpus `shell replay` uses when no corpus is named.

It lives in the package (not the working directory) so that a plain `pip install` replays from any
folder; importlib.resources finds it wherever the package was installed.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def shipped_corpus() -> Path:
    """The folder of the shipped tiny corpus (tiny preset, TP2, verify M=2, mtp1 draft M=1)."""
    return Path(str(files(__name__) / "corpus"))
