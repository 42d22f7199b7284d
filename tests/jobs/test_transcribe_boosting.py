"""`jobs/transcribe.py --phrases FILE --boost-weight W`: bad phrase lists refused in one line naming the file and
line before Ray starts; on an in-process Ray, the job's rows carry what boosting the same phrases gives in-process
(the ASR stage's decoder and the writer stage's CTC beam search both load the list), the `decoding` column names
the list, and an output made with other phrases is refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jobs.test_transcribe_checks import BUNDLED_MODEL, REPOSITORY, refused

DOMAIN = REPOSITORY / "samples" / "domain"
CONTACTS = ["luis phillips", "luis williams", "jeffrey phillips", "heather lucero", "heather lopez", "anna boyle",
            "jeff fox", "rachel perkins", "sara holden", "desiree diaz", "kimberly garcia", "phillip ward"]
ROWS = ("dev107", "dev133", "dev102")  # "call luis phillips", "... from heather lucero for dinner", no name


def manifest(tmp_path: Path) -> Path:
    lines = [json.loads(line) for line in (DOMAIN / "dev.json").read_text().splitlines()]
    chosen = [dict(row, audio_filepath=str(DOMAIN / row["audio_filepath"])) for row in lines
              if Path(row["audio_filepath"]).stem in ROWS]
    path = tmp_path / "m.json"
    path.write_text("".join(json.dumps(row) + "\n" for row in chosen))
    return path


@pytest.mark.parametrize(("content", "where", "cause"), [
    ("luis phillips\n\nanna boyle\n", "line 2", "empty phrase"),
    ("luis phillips\nanna boyle\tlots\n", "line 2", "weight after the tab must be a number > 0"),
    ("luis phillips\njeff fox\t-2\n", "line 2", "weight after the tab must be a number > 0"),
    ("luis phillips\nзоя\n", "line 2", "cannot encode"),
    ("\t3\n", "line 1", "empty phrase"),
])
def test_a_bad_phrase_list_is_refused_naming_the_file_and_line(tmp_path, content, where, cause):
    phrases = tmp_path / "phrases.txt"
    phrases.write_text(content, encoding="utf-8")
    line = refused("--manifest", str(manifest(tmp_path)), "--output", str(tmp_path / "out"),
                   "--model", str(BUNDLED_MODEL), "--phrases", str(phrases))
    assert f"{phrases}, {where}" in line and cause in line
    assert not (tmp_path / "out").exists()


def test_a_missing_list_and_a_zero_weight_are_refused(tmp_path):
    args = ("--manifest", str(manifest(tmp_path)), "--output", str(tmp_path / "out"))
    assert f"no phrase list at {tmp_path / 'none.txt'}" in refused(*args, "--phrases", str(tmp_path / "none.txt"))
    phrases = tmp_path / "phrases.txt"
    phrases.write_text("luis phillips\n")
    result = subprocess.run([sys.executable, str(REPOSITORY / "jobs" / "transcribe.py"), *args, "--phrases",
                             str(phrases), "--boost-weight", "0"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "invalid configuration: decoding.phrases_uri (--phrases) needs decoding.boost_weight > 0" in result.stderr


@pytest.mark.ray
@pytest.mark.nemo
@pytest.mark.parametrize("strategy", ["greedy", "ctc_beam"])
def test_the_job_boosts_the_list_as_in_process_decoding_does(ray_cluster, tmp_path, strategy):
    from pipeline import schema
    from pipeline.config import ModelConfig, ResourcesConfig, TranscribeJobConfig
    from pipeline.decoding.plan import DecodingConfig
    from pipeline.decoding.recognize import pad_waveforms
    from pipeline.graph import OutputMismatchError, run_transcription
    from pipeline.io import sink
    from pipeline.model.actor import load_model

    phrases = tmp_path / "contacts.txt"
    phrases.write_text("\n".join(CONTACTS) + "\n")
    decoding = DecodingConfig(strategy=strategy, beam_size=4, phrases_uri=str(phrases), boost_weight=0.5)
    resources = ResourcesConfig(device="cpu", asr_actors=1, audio_actors=1, writer_actors=1, torch_threads=1)
    model_config = ModelConfig(uri=str(BUNDLED_MODEL), cache_dir=str(tmp_path / "cache"))
    output = str(tmp_path / "out")
    config = TranscribeJobConfig(manifests=[str(manifest(tmp_path))], output=output, decoding=decoding,
                                 model=model_config, resources=resources)
    run_transcription(config, progress=lambda _: None)
    rows = {Path(r[schema.AUDIO_FILEPATH]).stem: r for r in sink.read_output(output).to_pylist()}
    assert set(rows) == set(ROWS) and all(r[schema.STATUS] == schema.STATUS_OK for r in rows.values())
    assert f"phrases={phrases}" in rows["dev107"][schema.DECODING] and "boost_weight=0.5" in rows["dev107"][
        schema.DECODING]

    # in-process, with the plan's own loaders: the same texts, and the names written right
    import soundfile

    from pipeline.decoding.fusion import load_fusion_model
    from pipeline.decoding.plan import decode_in_process, plan_decoding

    model = load_model(model_config, "cpu")
    plan = plan_decoding(model.facts, decoding)
    decode = decode_in_process(model, plan, load_fusion_model(plan, model, str(tmp_path / "cache")))
    for stem, row in rows.items():
        audio = soundfile.read(DOMAIN / "audio" / f"{stem}.flac", dtype="float32")[0]
        hypothesis = decode(*model.encode(*pad_waveforms([audio])))[0]
        assert row[schema.TEXT] == model.tokenizer.ids_to_text(hypothesis.tokens), stem
    assert rows["dev107"][schema.TEXT] == "call luis phillips"
    assert "heather lucero" in rows["dev133"][schema.TEXT]

    # other phrases make another kind of result: refused rather than mixed
    other = tmp_path / "other.txt"
    other.write_text("anna boyle\n")
    with pytest.raises(OutputMismatchError):
        run_transcription(TranscribeJobConfig(manifests=config.manifests, output=output, model=model_config,
                                              resources=resources,
                                              decoding=DecodingConfig(strategy=strategy, beam_size=4,
                                                                      phrases_uri=str(other))),
                          progress=lambda _: None)
