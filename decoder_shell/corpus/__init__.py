"""The corpus: content-addressed blobs, one manifest per (rank, boundary), and corpus.json."""

from .blobs import BlobStore
from .store import Corpus

__all__ = ["BlobStore", "Corpus"]
