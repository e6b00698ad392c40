"""Write captured boundaries straight into a corpus: blobs first, then the manifest, each atomic.

Several rank processes write into one corpus at once; a blob that already exists (a replicated
param, a collective output every rank holds, an earlier capture of the same bytes) is not written
again. The counts say how much was new, so a repeated capture can show what it reused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..commands.ops import op_tensors
from ..corpus import manifest as mf
from ..atomic import write_atomic
from ..corpus.blobs import BlobStore
from ..geometry import Boundary, Geometry


class CorpusWriter:
    def __init__(self, root: Path, geometry: Geometry):
        self.root = Path(root)
        self.geometry = geometry
        self.blobs = BlobStore(self.root)
        self.new_blobs = 0
        self.reused_blobs = 0
        self.manifests = 0

    def write(self, b: Boundary, rank: int, tensors: dict[str, np.ndarray], attrs: dict | None = None) -> None:
        """Store one (rank, boundary): `tensors` must already match ops.py's specs (assemble checks)."""
        entries = []
        for spec in op_tensors(b, self.geometry):
            digest, new = self.blobs.put(np.ascontiguousarray(tensors[spec.name]).tobytes())
            self.new_blobs += new
            self.reused_blobs += not new
            entries.append(mf.TensorEntry(spec.name, spec.role, spec.dtype, spec.shape, digest))
        m = mf.Manifest(b, rank, tuple(entries), attrs or {})
        write_atomic(mf.manifest_path(self.root, b, rank), mf.encode(m))
        self.manifests += 1
