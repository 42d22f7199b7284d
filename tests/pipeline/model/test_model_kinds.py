"""A model loopscribe cannot decode is refused from its `.nemo` config alone, before any cluster starts, naming
what it is and the kinds loopscribe decodes.

The `.nemo` files here are tars holding only a `model_config.yaml` (all the refusal reads): an attention
encoder-decoder as NeMo saves Canary (`target: ...EncDecMultiTaskModel`, `transf_decoder`, `prompt_format`), the
same without a `target`, a character-level CTC model and a class loopscribe has never heard of. The bundled models
(hybrid RNN-T and TDT + CTC, SentencePiece) pass. `jobs/transcribe.py` refuses the Canary file in one line, with
no traceback and without starting Ray.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from pipeline.model.nemo_file import (
    SUPPORTED_MODELS,
    UnsupportedModel,
    read_model_facts,
    read_model_layout,
)

REPOSITORY = Path(__file__).resolve().parents[3]
SAMPLE = REPOSITORY / "samples" / "sample00.flac"

CANARY = {
    "sample_rate": 16000,
    "prompt_format": "canary2",
    "tokenizer": {"type": "agg", "langs": {"en": {"type": "bpe", "dir": None}}},
    "preprocessor": {"_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
                     "sample_rate": 16000, "window_stride": 0.01, "features": 128},
    "encoder": {"_target_": "nemo.collections.asr.modules.ConformerEncoder", "d_model": 1024, "n_layers": 32,
                "subsampling_factor": 8},
    "transf_encoder": {"num_layers": 0},
    "transf_decoder": {"_target_": "nemo.collections.asr.modules.transformer.get_nemo_transformer",
                       "config_dict": {"num_layers": 8, "hidden_size": 1024}},
    "head": {"_target_": "nemo.collections.asr.parts.submodules.token_classifier.TokenClassifier",
             "num_classes": 16384},
    "decoding": {"strategy": "beam", "beam": {"beam_size": 1}},
    "target": "nemo.collections.asr.models.aed_multitask_models.EncDecMultiTaskModel",
}


def nemo_file(path: Path, config: dict) -> Path:
    """A `.nemo` tar holding `config` as its model_config.yaml, as NeMo lays it out (./model_config.yaml)."""
    data = yaml.safe_dump(config).encode("utf-8")
    with tarfile.open(path, "w") as archive:
        member = tarfile.TarInfo("./model_config.yaml")
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    return path


def assert_names_supported_kinds(message: str) -> None:
    for name in SUPPORTED_MODELS:
        assert name in message, message


def test_canary_is_refused_naming_what_it_is_and_what_is_supported(tmp_path):
    path = nemo_file(tmp_path / "canary-1b-v2.nemo", CANARY)
    with pytest.raises(UnsupportedModel) as raised:
        read_model_facts(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and "EncDecMultiTaskModel" in message
    assert "attention encoder-decoder" in message
    assert_names_supported_kinds(message)
    with pytest.raises(UnsupportedModel):  # not LayoutUnavailable: a layout would never help
        read_model_layout(path)


def test_a_config_without_its_class_is_judged_by_its_sections(tmp_path):
    untargeted = {key: value for key, value in CANARY.items() if key != "target"}
    with pytest.raises(UnsupportedModel, match="transf_decoder.*attention encoder-decoder") as raised:
        read_model_facts(nemo_file(tmp_path / "aed.nemo", untargeted))
    assert_names_supported_kinds(str(raised.value))
    headless = {key: CANARY[key] for key in ("sample_rate", "preprocessor", "encoder")}
    with pytest.raises(UnsupportedModel, match="neither a transducer joint nor a CTC decoder"):
        read_model_facts(nemo_file(tmp_path / "encoder_only.nemo", headless))


@pytest.mark.parametrize("target, what", [
    ("nemo.collections.asr.models.ctc_models.EncDecCTCModel", "characters"),
    ("nemo.collections.asr.models.classification_models.EncDecClassificationModel", "a classifier"),
    ("my_company.models.FancyASRModel", "not a transducer or CTC model loopscribe knows"),
])
def test_other_classes_are_refused(tmp_path, target, what):
    config = {"sample_rate": 16000, "decoder": {"num_classes": 28}, "target": target}
    with pytest.raises(UnsupportedModel) as raised:
        read_model_facts(nemo_file(tmp_path / "other.nemo", config))
    assert target.rsplit(".", 1)[-1] in str(raised.value) and what in str(raised.value)


@pytest.mark.parametrize("name, kind", [("demo_hybrid_rnnt_ctc.nemo", "hybrid_rnnt_ctc"),
                                        ("demo_hybrid_tdt_ctc.nemo", "hybrid_tdt_ctc")])
def test_the_supported_kinds_pass(name, kind):
    assert read_model_facts(REPOSITORY / "models" / name).kind == kind


def test_the_transcription_job_refuses_canary_before_the_cluster(tmp_path):
    path = nemo_file(tmp_path / "canary.nemo", CANARY)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"audio_filepath": str(SAMPLE), "duration": 1.7}) + "\n")
    result = subprocess.run([sys.executable, str(REPOSITORY / "jobs" / "transcribe.py"), "--manifest", str(manifest),
                             "--model", str(path), "--output", str(tmp_path / "out")],
                            cwd=REPOSITORY, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "ray" not in result.stderr.lower(), result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("loopscribe: ")
             and not line.startswith("loopscribe: warning")]
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and "EncDecMultiTaskModel" in lines[0]
    assert_names_supported_kinds(lines[0])
    assert not (tmp_path / "out").exists()
