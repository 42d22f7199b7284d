"""A crafted `.nemo` is refused before anything from it executes: a config `_target_` outside NeMo's allow-list,
and a checkpoint whose pickle carries a payload."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from pipeline.config import BUNDLED_MODEL

pytestmark = pytest.mark.nemo


def rewrite(destination: Path, config=None, weights=None) -> Path:
    """The bundled model with its config text and/or its weights' bytes replaced."""
    with tarfile.open(BUNDLED_MODEL) as source, tarfile.open(destination, "w") as target:
        for member in source.getmembers():
            data = source.extractfile(member).read() if member.isfile() else None
            if data is not None and member.name.endswith("model_config.yaml") and config:
                data = config(data.decode()).encode()
            if data is not None and member.name.endswith("model_weights.ckpt") and weights:
                data = weights(data)
            if data is not None:
                member.size = len(data)
            target.addfile(member, io.BytesIO(data) if data is not None else None)
    return destination


class Payload:
    """Unpickling this runs `os.system(command)`."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_a_config_target_outside_the_allow_list_is_refused_before_it_runs(tmp_path):
    from nemo.core.classes.common import UnsafeTargetError

    from pipeline.model.nemo import load_asr_model

    marker = tmp_path / "target-ran"
    crafted = rewrite(tmp_path / "target.nemo", config=lambda text: text.replace(
        "_target_: nemo.collections.asr.modules.SpectrogramAugmentation",
        f"_target_: os.system\n  command: touch {marker}", 1))
    assert "os.system" in tarfile.open(crafted).extractfile("./model_config.yaml").read().decode()
    with pytest.raises(UnsafeTargetError, match="os.system"):
        load_asr_model(str(crafted), cache_dir=tmp_path / "cache")
    assert not marker.exists()


def test_a_pickle_payload_in_the_weights_is_refused_before_it_runs(tmp_path):
    import pickle

    import torch

    from pipeline.model.nemo import load_asr_model

    marker = tmp_path / "pickle-ran"

    def with_payload(data: bytes) -> bytes:
        state = torch.load(io.BytesIO(data), weights_only=True)
        state["payload"] = Payload(f"touch {marker}")
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return buffer.getvalue()

    crafted = rewrite(tmp_path / "pickle.nemo", weights=with_payload)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        load_asr_model(str(crafted), cache_dir=tmp_path / "cache")
    assert not marker.exists()
    # the payload is real: an unrestricted load would have run it
    with tarfile.open(crafted) as archive:
        weights = archive.extractfile("./model_weights.ckpt").read()
    torch.load(io.BytesIO(weights), weights_only=False)
    assert marker.exists()
