"""Content-addressed blob store: blake3 of the raw bytes names the blob; zstd on disk; git-like shards.

blobs/ab/abcdef...(64 hex).zst holds the zstd frame of the raw tensor bytes. A blob that exists is
never rewritten (dedup across ranks, boundaries and captures); several writer processes may put the
same blob at once because each write is an atomic rename of identical content.
"""

from __future__ import annotations

import re
from pathlib import Path

import blake3
import zstandard

from ..errors import CorpusError
from .atomic import write_atomic

DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
ZSTD_LEVEL = 3


def digest_of(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


class BlobStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.dir = self.root / "blobs"

    def path(self, digest: str) -> Path:
        if not isinstance(digest, str) or not DIGEST_RE.match(digest):
            raise CorpusError(f"{self.dir}: blob digest {str(digest)[:80]!r} is not 64 lowercase hex characters")
        p = self.dir / digest[:2] / f"{digest}.zst"
        if self.dir.resolve() not in p.resolve().parents:
            raise CorpusError(f"{p}: blob path escapes the corpus")
        return p

    def put(self, data: bytes) -> tuple[str, bool]:
        """Store raw bytes; returns (digest, newly_written)."""
        digest = digest_of(data)
        p = self.path(digest)
        if p.exists():
            return digest, False
        write_atomic(p, zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data))
        return digest, True

    def get(self, digest: str, nbytes: int) -> bytes:
        """Read a blob, bounded by the size its manifest declares, and check its digest."""
        p = self.path(digest)
        try:
            frame = p.read_bytes()
        except FileNotFoundError:
            raise CorpusError(f"{p}: blob is missing") from None
        except OSError as e:
            raise CorpusError(f"{p}: cannot read blob ({e.strerror})") from None
        try:
            params = zstandard.get_frame_parameters(frame)
            if params.content_size not in (zstandard.CONTENTSIZE_UNKNOWN, nbytes):
                raise CorpusError(f"{p}: blob declares {params.content_size} bytes, manifest says {nbytes}")
            data = zstandard.ZstdDecompressor().decompress(frame, max_output_size=nbytes)
        except zstandard.ZstdError as e:
            raise CorpusError(f"{p}: blob is corrupt or truncated ({e})") from None
        if len(data) != nbytes:
            raise CorpusError(f"{p}: blob holds {len(data)} bytes, manifest says {nbytes}")
        if digest_of(data) != digest:
            raise CorpusError(f"{p}: blob content does not match its digest")
        return data

    def stored_size(self, digest: str) -> int:
        return self.path(digest).stat().st_size

    def digests(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(p.name[:-4] for p in self.dir.glob("??/*.zst"))
