"""Options of `shell serve-reference` (no heavy imports: checked before torch loads)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeOptions:
    tp: int
    port: int
    mhc: str = "transformers"
    verify_rows: int = 2
    seed: int = 0
    token_file: str = ""
    capture: bool = True
    backend: str = "gloo"
    run_dir: str = ""
    master_port: int = 0
    device: str = "cpu"  # cpu, or cuda: one GPU per rank with nccl, else every rank on GPU 0 over gloo
    preset: str = "reference"
    layers: int = 0  # 0: the preset's
    routed_experts: int = 0  # 0: the preset's
    started: float = 0.0  # time.monotonic() when the launcher started (the ready line reports start-up)
