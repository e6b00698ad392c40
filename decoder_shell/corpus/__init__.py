"""The corpus: content-addressed blobs, one manifest per (rank, boundary), and corpus.json."""

from pathlib import Path

from .blobs import BlobStore
from .store import Corpus

#: The corpus a command reads when none is named: ./corpus.
DEFAULT_CORPUS = Path("corpus")

__all__ = ["BlobStore", "Corpus", "DEFAULT_CORPUS"]
