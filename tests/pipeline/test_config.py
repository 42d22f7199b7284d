"""Flags and YAML become one frozen config; bad settings are refused with the setting's name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import (
    BUNDLED_MANIFEST,
    DecodingConfig,
    ResourcesConfig,
    TranscribeJobConfig,
    config_from_dict,
)

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY))
from jobs import transcribe  # noqa: E402
from pipeline.decoding.plan import advice, describe  # noqa: E402


def resolve(*argv: str) -> TranscribeJobConfig:
    return transcribe.config_from_args(transcribe.parser().parse_args(list(argv)))


def test_defaults_are_the_embedded_quickstart():
    config = resolve()
    assert config == TranscribeJobConfig()
    assert config.manifests == (str(BUNDLED_MANIFEST),) and config.model.uri.endswith(".nemo")
    assert config.decoding.strategy == "greedy" and config.resources.device == "auto"


def test_flags_override_yaml_which_overrides_defaults(tmp_path):
    yaml_file = tmp_path / "job.yaml"
    yaml_file.write_text(
        "manifests: [s3://b/a.json, s3://b/b.jsonl.gz]\noutput: s3://b/out\n"
        "decoding: {strategy: alsd, beam_size: 8, lm_uri: s3://b/lm.bin, lm_weight: 0.5}\n"
        "resources: {gpu_actors: 4, batch_audio_s: 900}\n")
    config = resolve("--config", str(yaml_file), "--beam-size", "2", "--asr-actors", "8", "--output", "out2")
    assert config.manifests == ("s3://b/a.json", "s3://b/b.jsonl.gz") and config.output == "out2"
    assert config.decoding == DecodingConfig(strategy="alsd", beam_size=2, lm_uri="s3://b/lm.bin", lm_weight=0.5)
    assert config.resources == ResourcesConfig(asr_actors=8, batch_audio_s=900)  # the YAML's old name, overridden


def test_old_resource_names_still_work_as_hidden_aliases(tmp_path):
    assert resolve("--gpu-actors", "3", "--cpu-actors", "4", "--ctc-actors", "5").resources == ResourcesConfig(
        asr_actors=3, audio_actors=4, writer_actors=5)
    assert config_from_dict({"resources": {"ctc_actors": 2}}).resources.writer_actors == 2
    with pytest.raises(ValueError, match="old name of resources.asr_actors"):
        config_from_dict({"resources": {"gpu_actors": 2, "asr_actors": 3}})
    help_text = transcribe.parser().format_help()
    assert "--asr-actors" in help_text and "--gpu-actors" not in help_text


def test_a_value_means_the_same_in_yaml_and_on_the_command_line(tmp_path):
    yaml_file = tmp_path / "job.yaml"
    yaml_file.write_text("decoding: {strategy: ctc_beam, ctc_collapse_threshold: 0, ctc_beam_threshold: 12}\n")
    from_yaml = resolve("--config", str(yaml_file))
    from_flags = resolve("--strategy", "ctc_beam", "--ctc-collapse-threshold", "0", "--ctc-beam-threshold", "12")
    assert from_yaml == from_flags and from_yaml.decoding.ctc_collapse_threshold is None
    yaml_file.write_text("decoding: {lm_uri: lm.bin}\n")
    with pytest.raises(SystemExit, match="needs decoding.lm_weight > 0"):  # an LM without a weight, either way
        resolve("--config", str(yaml_file))


def test_nemo_names_are_aliases_and_collapse_zero_turns_it_off():
    config = resolve("--strategy", "ctc_beam", "--lm", "lm.bin", "--ngram-lm-alpha", "0.3",
                     "--ctc-collapse-threshold", "0")
    assert config.decoding.strategy == "ctc_beam" and config.decoding.lm_weight == 0.3
    assert config.decoding.ctc_collapse_threshold is None
    assert describe(config.decoding) == "ctc_beam beam_size=4 lm=lm.bin lm_weight=0.3"


def test_the_decoding_column_names_every_setting_that_changed_the_results():
    assert describe(resolve("--strategy", "ctc_beam", "--ctc-insertion-bonus", "2.5", "--lm", "lm.bin",
                            "--lm-weight", "1", "--ctc-collapse-threshold", "0").decoding) == (
        "ctc_beam beam_size=4 ctc_insertion_bonus=2.5 lm=lm.bin lm_weight=1")
    assert describe(resolve("--strategy", "alsd", "--lm", "lm.bin", "--lm-weight", "0.5", "--pruning", "early",
                   "--blank-lm-scoring", "none").decoding) == (
        "alsd beam_size=4 lm=lm.bin lm_weight=0.5 pruning=early blank_lm_scoring=none")
    assert describe(resolve("--strategy", "alsd", "--pruning", "early").decoding) == "alsd beam_size=4"  # no LM


@pytest.mark.parametrize(("values", "message"), [
    ({"decoding": {"strategy": "beam"}}, "decoding.strategy must be one of"),
    ({"decoding": {"beam_sise": 4}}, "unknown keys in decoding: beam_sise"),
    ({"outptu": "x"}, "unknown config keys: outptu"),
    ({"decoding": {"lm_weight": 0.5}}, "needs decoding.lm_uri"),
    ({"resources": {"gpu_actors": 0}}, "resources.asr_actors must be an integer >= 1"),
    ({"resources": {"side_stage_nice": 20}}, "resources.side_stage_nice must be an integer from 0 to 19"),
    ({"decoding": {"beam_size": 2.5}}, "decoding.beam_size must be an integer"),
    ({"decoding": {"ctc_collapse_threshold": 1.5}}, "ctc_collapse_threshold must lie in"),
    ({"manifests": []}, "at least one manifest"),
])
def test_bad_settings_name_the_setting(values, message):
    with pytest.raises(ValueError, match=message):
        config_from_dict(values)


def test_ctc_beam_with_an_lm_and_no_insertion_bonus_gets_a_note():
    assert advice(resolve("--strategy", "ctc_beam", "--lm", "lm.bin", "--lm-weight", "1").decoding)[0].startswith(
        "ctc_beam with an LM and no --ctc-insertion-bonus")
    assert advice(resolve("--strategy", "ctc_beam", "--lm", "lm.bin", "--lm-weight", "1",
                                     "--ctc-insertion-bonus", "4").decoding) == ()
    assert advice(resolve("--strategy", "ctc_beam").decoding) == ()  # no LM: nothing to balance
    assert advice(resolve("--strategy", "alsd", "--lm", "lm.bin", "--lm-weight", "1").decoding) == ()


@pytest.mark.parametrize(("flag", "message"), [("--model", "no model at /nowhere/x: pass --model"),
                                               ("--lm", "no LM at /nowhere/x: pass --lm")])
def test_a_missing_local_model_or_lm_is_named_before_ray_starts(flag, message):
    argv = [flag, "/nowhere/x"] + (["--lm-weight", "0.5"] if flag == "--lm" else [])
    with pytest.raises(SystemExit, match=message):
        transcribe.main(argv)


def test_lm_without_weight_is_refused():
    with pytest.raises(SystemExit, match="lm_uri \\(--lm\\) needs decoding.lm_weight > 0 \\(--lm-weight"):
        resolve("--lm", "lm.bin")


def test_cli_prints_the_resolved_config_and_has_complete_help():
    run = subprocess.run([sys.executable, str(REPOSITORY / "jobs" / "transcribe.py"), "--print-config",
                          "--decoding", "wind_greedy", "--window-size", "16"], capture_output=True, text=True,
                         check=True)
    printed = json.loads(run.stdout)
    assert printed["decoding"]["strategy"] == "wind_greedy" and printed["decoding"]["window_size"] == 16
    assert config_from_dict(printed) == resolve("--decoding", "wind_greedy", "--window-size", "16")
    help_text = transcribe.parser().format_help()
    for flag in ("--manifest", "--output", "--model", "--decoding", "--beam-size", "--lm", "--lm-weight",
                 "--asr-actors", "--audio-actors", "--writer-actors", "--batch-audio-s", "--device", "--config",
                 "--ctc-beam-threshold", "--ctc-insertion-bonus", "--ctc-collapse-threshold"):
        assert flag in help_text
    for strategy in ("greedy", "wind_greedy", "alsd", "aes", "wind_beam", "ctc_greedy", "ctc_beam"):
        assert strategy in help_text
