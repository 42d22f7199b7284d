"""Shared test setup: marker skips, a quiet single-threaded torch, and small random NeMo models."""

from __future__ import annotations

import importlib.util

import pytest
import soundfile
import torch

# Tests run many tiny ops; one thread avoids oversubscribing a 2-core machine.
torch.set_num_threads(1)


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _missing(marker: str) -> str | None:
    if marker == "gpu":
        return None if torch.cuda.is_available() else "no CUDA GPU visible"
    if marker == "ray":
        return None if _has_module("ray") else "ray is not installed"
    if marker == "nemo":
        return None if _has_module("nemo") else "nemo_toolkit is not installed"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in ("gpu", "ray", "nemo"):
            if item.get_closest_marker(marker) is not None:
                reason = _missing(marker)
                if reason is not None:
                    item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def nemo_assets(tmp_path_factory):
    """Tokenizer, audio files and one calibrated `.nemo` per kind, built once per session."""
    pytest.importorskip("nemo.collections.asr")
    from tests.support import random_nemo

    root = tmp_path_factory.mktemp("nemo")
    tokenizer_dir = random_nemo.train_tokenizer(root / "tokenizer", vocab_size=64)
    files = random_nemo.synthesize(root / "audio", random_nemo.SENTENCES[:8])
    waveforms = [soundfile.read(path, dtype="float32")[0] for path in files]
    checkpoints = {}
    for kind in random_nemo.KINDS:
        model = random_nemo.build_random_model(kind, tokenizer_dir)
        random_nemo.calibrate_emission(model, waveforms[:4])
        checkpoints[kind] = root / f"{kind}.nemo"
        model.save_to(str(checkpoints[kind]))
    return {"files": files, "waveforms": waveforms, "checkpoints": checkpoints}
