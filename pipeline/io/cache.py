"""The node-local cache: one root, and every folder under it named here (callers ask, never spell a folder).

    <root>                      `DEFAULT_CACHE_DIR`, or `--cache-dir` (`ModelConfig.cache_dir`)
        models/                 checkpoints fetched from remote storage      (a fetch store)
        lms/                    n-gram LMs                                   (a fetch store)
            word_lms/           word-level ARPA files converted to token LMs (`pipeline/lm/word_arpa.py`)
        phrases/                phrase lists                                 (a fetch store)

A fetch store (`pipeline/io/fetch.py`) is content-addressed: `blobs/<sha256><suffix>` holds the bytes,
`refs/<key>.json` maps a remote object to its blob (and a version of a local file to its sha256, which is hashed
once), and `locks/<key>.lock` makes concurrent fetches of one object on a node wait for one download.
`file_lock` is that lock, for whatever else a node's processes build once.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

DEFAULT_CACHE_DIR = str(Path.home() / ".cache" / "loopscribe")


def models_dir(cache_dir: str | Path) -> Path:
    """The fetch store of checkpoints under the cache root `cache_dir`."""
    return Path(cache_dir) / "models"


DEFAULT_MODELS_DIR = models_dir(DEFAULT_CACHE_DIR)  # where a checkpoint goes when a caller names no cache root


def lms_dir(cache_dir: str | Path) -> Path:
    """The fetch store of n-gram LMs under the cache root `cache_dir`."""
    return Path(cache_dir) / "lms"


def word_lms_dir(cache_dir: str | Path) -> Path:
    """Where word-level ARPA files converted to token LMs are kept, under the cache root `cache_dir`."""
    return lms_dir(cache_dir) / "word_lms"


def phrases_dir(cache_dir: str | Path) -> Path:
    """The fetch store of phrase lists under the cache root `cache_dir`."""
    return Path(cache_dir) / "phrases"


def store_dirs(store: str | Path) -> tuple[Path, Path, Path]:
    """A fetch store's folders: (blobs, refs, locks)."""
    store = Path(store)
    return store / "blobs", store / "refs", store / "locks"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock held across processes on this node (released if the holder dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
