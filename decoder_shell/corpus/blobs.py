"""Content-addressed blob store: blake3 of the raw bytes names the blob; zstd on disk; git-like shards.

blobs/ab/abcdef...(64 hex).zst holds the zstd frame of the raw tensor bytes followed by a zstd
skippable frame carrying the blake3 of the compressed frame. The raw digest proves the content; the
stored digest proves every stored byte (zstd decoders ignore some header bits, so a changed byte
could otherwise decode to the same content), and the trailer's fixed place makes appended bytes an
error. A blob that exists is never rewritten (dedup across ranks, boundaries and captures); several
writer processes may put the same blob at once because each write is an atomic rename of identical
content. Reads are bounded by the size the manifest declares, open regular files only (files.py),
and refuse any byte after the one zstd frame. A writer staging a new corpus may take an unchanged
blob from the corpus it replaces (`reuse`): a hard link, after the stored digest is checked.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import blake3
import zstandard

from ..errors import CorpusError
from ..atomic import write_atomic
from .files import inside, read_regular

DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
ZSTD_LEVEL = 3
TRAILER_MAGIC = 0x184D2A5D  # a zstd skippable-frame magic number (0x184D2A50..5F)
TRAILER = struct.Struct("<II32s")  # magic, payload size (32), blake3 of the compressed frame


def digest_of(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def encode(data: bytes) -> bytes:
    frame = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True).compress(data)
    return frame + TRAILER.pack(TRAILER_MAGIC, 32, blake3.blake3(frame).digest())


class BlobStore:
    def __init__(self, root: Path, reuse: Path | None = None):
        self.root = Path(root)
        self.dir = self.root / "blobs"
        self.reuse = BlobStore(reuse) if reuse is not None else None

    def path(self, digest: str) -> Path:
        if not isinstance(digest, str) or not DIGEST_RE.match(digest):
            raise CorpusError(f"{self.dir}: blob digest {str(digest)[:80]!r} is not 64 lowercase hex characters")
        return self.dir / digest[:2] / f"{digest}.zst"

    def put(self, data: bytes) -> tuple[str, bool]:
        """Store raw bytes; returns (digest, newly_written)."""
        digest = digest_of(data)
        p = self.path(digest)
        if p.exists():
            return digest, False
        if self.reuse is not None and self.reuse.link_into(digest, p):
            return digest, False
        write_atomic(p, encode(data))
        return digest, True

    def link_into(self, digest: str, dest: Path) -> bool:
        """Hard-link this store's blob `digest` to `dest` if it is here and its stored bytes are whole."""
        src = self.path(digest)
        try:
            inside(self.root, src)
            stored = read_regular(src, 1 << 40, "blob")
        except CorpusError:
            return False
        frame, trailer = stored[:-TRAILER.size], stored[-TRAILER.size:]
        if len(stored) < TRAILER.size or TRAILER.unpack(trailer) != (TRAILER_MAGIC, 32, blake3.blake3(frame).digest()):
            return False
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.link(src, dest)
        except FileExistsError:
            pass
        except OSError:
            return False
        return True

    def get(self, digest: str, nbytes: int) -> bytes:
        """Read a blob, bounded by the size its manifest declares, and check both digests."""
        p = self.path(digest)
        # a zstd frame never needs more than ~nbytes + 1/128 + headers; refuse anything far larger
        stored = read_regular(p, nbytes + nbytes // 64 + 4096 + TRAILER.size, "blob", self.root)
        if len(stored) < TRAILER.size:
            raise CorpusError(f"{p}: blob is truncated")
        frame, trailer = stored[:-TRAILER.size], stored[-TRAILER.size:]
        magic, length, frame_digest = TRAILER.unpack(trailer)
        if magic != TRAILER_MAGIC or length != 32:
            raise CorpusError(f"{p}: blob is truncated or has bytes after its end")
        if blake3.blake3(frame).digest() != frame_digest:
            raise CorpusError(f"{p}: stored blob bytes are corrupt (stored digest mismatch)")
        try:
            params = zstandard.get_frame_parameters(frame)
            if params.content_size == zstandard.CONTENTSIZE_UNKNOWN:
                raise CorpusError(f"{p}: blob frame does not declare its size")
            if params.content_size != nbytes:
                raise CorpusError(f"{p}: blob declares {params.content_size} bytes, manifest says {nbytes}")
            data = zstandard.ZstdDecompressor().decompress(frame, max_output_size=nbytes, allow_extra_data=False)
        except zstandard.ZstdError as e:
            raise CorpusError(f"{p}: blob is corrupt or truncated ({e})") from None
        except MemoryError:
            raise CorpusError(f"{p}: blob is too large to read") from None
        if len(data) != nbytes:
            raise CorpusError(f"{p}: blob holds {len(data)} bytes, manifest says {nbytes}")
        if digest_of(data) != digest:
            raise CorpusError(f"{p}: blob content does not match its digest")
        return data

    def stored_size(self, digest: str) -> int:
        return os.lstat(self.path(digest)).st_size

    def digests(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(p.name[:-4] for p in self.dir.glob("??/*.zst"))
