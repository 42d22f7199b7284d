"""The node-local cache's layout, which users see on disk: one root (`--cache-dir`, by default
~/.cache/loopscribe) and the same folders under it whoever asks."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import ModelConfig
from pipeline.io.cache import (
    DEFAULT_CACHE_DIR,
    DEFAULT_MODELS_DIR,
    lms_dir,
    models_dir,
    phrases_dir,
    store_dirs,
    word_lms_dir,
)


def test_every_folder_lies_under_the_one_root():
    root = Path("/cache")
    assert models_dir(root) == root / "models"
    assert lms_dir(str(root)) == root / "lms"
    assert word_lms_dir(root) == root / "lms" / "word_lms"
    assert phrases_dir(root) == root / "phrases"
    assert store_dirs(models_dir(root)) == (root / "models" / "blobs", root / "models" / "refs",
                                            root / "models" / "locks")


def test_the_default_root_is_the_cache_dir_default():
    assert ModelConfig().cache_dir == DEFAULT_CACHE_DIR == str(Path.home() / ".cache" / "loopscribe")
    assert DEFAULT_MODELS_DIR == models_dir(DEFAULT_CACHE_DIR)
