"""The corpus: content-addressed blobs, one manifest per (rank, boundary), and corpus.json."""

from pathlib import Path

from ..data import shipped_corpus
from .blobs import BlobStore
from .store import Corpus

#: The corpus a command reads when none is named, if the current folder holds one: ./corpus.
DEFAULT_CORPUS = Path("corpus")
#: Else the tiny corpus shipped inside the package, so that an installed `shell replay` works anywhere.
SHIPPED_CORPUS = shipped_corpus()
CORPUS_HELP = (f"corpus folder (default: ./corpus when the current folder holds one, else the tiny corpus "
               f"shipped in the package, {SHIPPED_CORPUS})")


def default_corpus() -> Path:
    """./corpus when it holds a corpus.json, else the shipped corpus."""
    return DEFAULT_CORPUS if (DEFAULT_CORPUS / "corpus.json").is_file() else SHIPPED_CORPUS


__all__ = ["BlobStore", "Corpus", "CORPUS_HELP", "DEFAULT_CORPUS", "SHIPPED_CORPUS", "default_corpus"]
