"""Shared fixtures of the pipeline tests: small random NeMo models calibrated to emit like trained ones."""

from __future__ import annotations

import pytest
import soundfile


@pytest.fixture(scope="session")
def nemo_assets(tmp_path_factory):
    """Tokenizer, audio files and one calibrated `.nemo` per kind, built once per session."""
    pytest.importorskip("nemo.collections.asr")
    from tests.pipeline import random_nemo

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
