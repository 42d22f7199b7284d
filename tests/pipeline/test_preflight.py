"""The checks every job runs before any cluster work (`pipeline/preflight.py`): one line each, a local name checked
here and a remote one left for when it is fetched (the jobs' own refusals, end to end: tests/jobs/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import BUNDLED_MODEL, BUNDLED_TDT_MODEL, LongAudioConfig, ModelConfig, TranscribeJobConfig
from pipeline.decoding.plan import DecodingConfig
from pipeline.preflight import PreflightError, check_model_file, check_transcription, phrase_list_problem, plan_job


def test_a_missing_local_model_is_one_line_and_a_remote_one_is_left_for_the_fetch(tmp_path):
    missing = tmp_path / "missing.nemo"
    message = f"no model at {missing}: pass --model PATH_OR_URI (a NeMo .nemo file)"
    with pytest.raises(PreflightError) as refused:
        check_model_file(str(missing))
    assert str(refused.value) == message
    with pytest.raises(PreflightError, match="no model at file://"):  # a file:// URI is a local path
        check_model_file(f"file://{missing}")
    check_model_file("s3://bucket/models/asr.nemo")
    check_model_file(str(BUNDLED_MODEL))


def test_a_missing_local_lm_or_phrase_list_is_refused_with_a_remote_model_too(tmp_path):
    def refusal(**decoding) -> str:
        config = TranscribeJobConfig(model=ModelConfig(uri="s3://bucket/asr.nemo"), decoding=DecodingConfig(**decoding))
        with pytest.raises(PreflightError) as refused:
            check_transcription(config)
        return str(refused.value)

    assert refusal(lm_uri=str(tmp_path / "none.lm"), lm_weight=0.5).startswith(f"no LM at {tmp_path / 'none.lm'}")
    assert refusal(phrases_uri=str(tmp_path / "none.txt"), boost_weight=1.0).startswith(
        f"no phrase list at {tmp_path / 'none.txt'}")


def test_phrase_list_problems_name_the_file_and_line(tmp_path):
    phrases = tmp_path / "phrases.txt"
    phrases.write_text("luis phillips\n\nanna boyle\n", encoding="utf-8")
    assert phrase_list_problem(str(phrases)).startswith(f"{phrases}, line 2: empty phrase")
    assert phrase_list_problem(str(phrases), name="s3://b/p.txt").startswith("s3://b/p.txt, line 2")
    phrases.write_text("luis phillips\n", encoding="utf-8")
    assert phrase_list_problem(str(phrases)) is None


@pytest.mark.skipif(not Path(BUNDLED_TDT_MODEL).is_file(), reason="the bundled TDT model is not there")
def test_a_local_model_is_planned_as_the_driver_plans_it():
    """A strategy the model cannot run is refused with the planner's own message, the one `pipeline/graph.py`
    gives once a remote model is fetched (both call `plan_job`)."""
    from pipeline.model.nemo_file import read_model_facts

    model = ModelConfig(uri=str(BUNDLED_TDT_MODEL))
    check_transcription(TranscribeJobConfig(model=model, long_audio=LongAudioConfig(attention="local")))  # rel_pos
    config = TranscribeJobConfig(model=model, decoding=DecodingConfig(strategy="wind_beam"))
    with pytest.raises(ValueError) as planned:
        plan_job(read_model_facts(str(BUNDLED_TDT_MODEL)), config)
    assert "supports RNN-T only" in str(planned.value)
    with pytest.raises(PreflightError) as refused:
        check_transcription(config)
    assert str(refused.value) == str(planned.value)
