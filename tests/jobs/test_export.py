"""Exports of a real transcription (`jobs/transcribe.py --export`, `jobs/export.py`), read back by real readers.

One job on an in-process Ray transcribes bundled samples with the bundled model: six files with references, one file
as two segments (offsets), a copy of a sample under another folder (a stem two files share) and a file that does not
exist (an error row), and exports every format when it ends. Then:
- SRT (the `srt` library) and WebVTT (`webvtt-py`) hold exactly the Parquet's words, at their times from the
  recording's start (the second segment at its offset), in cues that keep the rules (docs/exports.md);
- the NeMo manifest loads with NeMo's own readers (`read_manifest`, `item_iter`) and NeMo's scorer
  (`cal_write_wer`, what speech_to_text_eval.py runs) gives the WER jiwer gives the Parquet's texts;
- the CTM follows NIST's line format, and its words score to the same WER as the Parquet's texts;
- the error row is listed (`_errors.tsv`, the console), never exported;
- `jobs/export.py` as a command: other cue rules, another folder, S3, an unfinished output refused unless asked.
"""

from __future__ import annotations

import contextlib
import csv
import html
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY))
SAMPLES = REPOSITORY / "samples"
BUNDLED_MODEL = REPOSITORY / "models" / "demo_hybrid_rnnt_ctc.nemo"
WHOLE = [f"sample0{i}" for i in range(6)]  # transcribed whole, with their references
SEGMENTED, SPLIT_S = "sample07", 1.7  # transcribed as two segments, split here
FORMATS = ("srt", "vtt", "txt", "nemo", "ctm")
CTM_LINE = re.compile(r"^(\S+) (\d+) (\d+\.\d{3}) (\d+\.\d{3}) (\S+)( (0(\.\d+)?|1(\.0+)?))?$")


@pytest.fixture(scope="module")
def job(tmp_path_factory, ray_cluster):
    """The job's output, its exports folder, the manifest rows and the console."""
    import soundfile

    root = tmp_path_factory.mktemp("export_job")
    references = {json.loads(line)["audio_filepath"]: json.loads(line) for line in
                  (SAMPLES / "manifest.json").read_text().splitlines()}
    rows = [dict(references[f"{stem}.flac"], audio_filepath=str(SAMPLES / f"{stem}.flac")) for stem in WHOLE]
    length_s = soundfile.info(SAMPLES / f"{SEGMENTED}.flac").duration
    rows += [{"audio_filepath": str(SAMPLES / f"{SEGMENTED}.flac"), "offset": 0.0, "duration": SPLIT_S, "part": 1},
             {"audio_filepath": str(SAMPLES / f"{SEGMENTED}.flac"), "offset": SPLIT_S,
              "duration": round(length_s - SPLIT_S, 3), "part": 2}]
    (root / "other").mkdir()
    shutil.copy(SAMPLES / "sample03.flac", root / "other" / "sample03.flac")
    rows.append(dict(references["sample03.flac"], audio_filepath=str(root / "other" / "sample03.flac")))
    rows.append({"audio_filepath": str(root / "missing.flac"), "duration": 2.0, "text": "never heard"})
    manifest = root / "manifest.json"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = root / "out"
    from jobs.transcribe import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        assert main(["--manifest", str(manifest), "--output", str(output), "--model", str(BUNDLED_MODEL),
                     "--cache-dir", str(root / "cache"), "--device", "cpu", "--asr-actors", "1", "--audio-actors",
                     "1", "--writer-actors", "1", "--torch-threads", "1", "--export", *FORMATS]) == 0
    return {"output": output, "exports": output / "_exports", "rows": rows, "stdout": stdout.getvalue(),
            "stderr": stderr.getvalue(), "root": root}


def parquet_rows(output: Path) -> list[dict]:
    from pipeline.io import sink

    return sink.read_output(str(output)).to_pylist()


def recordings_of(output: Path) -> dict[str, list[dict]]:
    """Recording name -> its ok rows, named as the export names them (an independent reading of the rule: the stem,
    with the path's hash where two files share it)."""
    import hashlib

    by_audio: dict[str, list[dict]] = {}
    for row in parquet_rows(output):
        if row["status"] == "ok":
            by_audio.setdefault(row["audio_filepath"], []).append(row)
    stems = [Path(audio).stem for audio in by_audio]
    names = {}
    for audio, rows in by_audio.items():
        stem = Path(audio).stem
        unique = stems.count(stem) == 1
        names[stem if unique else f"{stem}-{hashlib.sha1((audio + chr(0)).encode()).hexdigest()[:8]}"] = sorted(
            rows, key=lambda r: r["offset"])
    return names


def timed_words(rows: list[dict]) -> list[tuple[str, float, float]]:
    return [(w["word"], row["offset"] + w["start"], row["offset"] + w["end"]) for row in rows for w in row["words"]]


def test_the_job_exports_every_format_when_it_ends_and_lists_the_error_row(job):
    exports = job["exports"]
    assert "exported 9 rows of 8 recordings as srt, vtt, txt, nemo, ctm -> " in job["stdout"]
    assert "1 error rows not exported" in job["stderr"] and "missing.flac" in job["stderr"]
    names = recordings_of(job["output"])
    assert len(names) == 8 and sum(name.startswith("sample03-") for name in names) == 2
    for format_name, suffix in (("srt", ".srt"), ("vtt", ".vtt"), ("txt", ".txt")):
        assert sorted(p.name for p in (exports / format_name).iterdir()) == sorted(n + suffix for n in names)
    with open(exports / "_errors.tsv", newline="") as handle:
        (error,) = list(csv.DictReader(handle, dialect=csv.excel_tab))
    assert error["audio_filepath"].endswith("missing.flac") and error["line"] == str(len(job["rows"]))
    assert "not found" in error["error"]
    assert not any("missing" in p.name for p in exports.rglob("*"))
    import pandas

    assert len(pandas.read_parquet(job["output"])) == len(job["rows"])  # the exports folder does not hide the rows


def test_subtitles_read_back_with_subtitle_parsers_hold_the_parquets_words_at_their_times(job):
    import srt
    import webvtt

    for name, rows in recordings_of(job["output"]).items():
        words = timed_words(rows)
        subtitles = list(srt.parse((job["exports"] / "srt" / f"{name}.srt").read_text(encoding="utf-8")))
        captions = webvtt.read(str(job["exports"] / "vtt" / f"{name}.vtt")).captions
        assert [s.content for s in subtitles] == [html.unescape(c.raw_text) for c in captions]
        assert [(s.start.total_seconds(), s.end.total_seconds()) for s in subtitles] == [
            (c.start_in_seconds + int(c.start[-3:]) / 1000, c.end_in_seconds + int(c.end[-3:]) / 1000)
            for c in captions]
        assert " ".join(s.content for s in subtitles).split() == [w for w, _, _ in words], name
        position = 0
        for subtitle in subtitles:
            lines = subtitle.content.split("\n")
            assert len(lines) <= 2 and all(len(line) <= 42 for line in lines)
            inside = words[position:position + len(subtitle.content.split())]
            position += len(inside)
            assert subtitle.start.total_seconds() == pytest.approx(inside[0][1], abs=5e-4)
            assert subtitle.end.total_seconds() >= inside[-1][2] - 5e-4
            assert subtitle.end.total_seconds() - subtitle.start.total_seconds() <= 7.0 + 1e-3 or len(inside) == 1
    segmented = recordings_of(job["output"])[SEGMENTED]
    assert [row["offset"] for row in segmented] == [0.0, SPLIT_S]
    second = [s for s in srt.parse((job["exports"] / "srt" / f"{SEGMENTED}.srt").read_text())
              if s.start.total_seconds() >= SPLIT_S]
    assert second and " ".join(s.content for s in second).split() == segmented[1]["text"].split()


@pytest.mark.nemo
def test_the_nemo_manifest_loads_with_nemos_readers_and_scores_as_the_parquet(job, tmp_path):
    import jiwer
    from nemo.collections.asr.parts.utils.eval_utils import cal_write_wer
    from nemo.collections.asr.parts.utils.manifest_utils import read_manifest
    from nemo.collections.common.parts.preprocessing.manifest import item_iter

    manifest = job["exports"] / "nemo" / "transcripts.json"
    lines = read_manifest(str(manifest))
    ok = [row for row in parquet_rows(job["output"]) if row["status"] == "ok"]
    assert len(lines) == len(ok) == len(job["rows"]) - 1
    ordered = sorted(ok, key=lambda row: row["line"])  # the manifest's order
    assert [line["pred_text"] for line in lines] == [row["text"] for row in ordered]
    items = list(item_iter(str(manifest)))
    assert all(Path(item["audio_file"]).is_file() for item in items)
    assert [item.get("offset") for item in items] == [row["offset"] or None for row in ordered]
    assert [line["duration"] for line in lines] == [row["duration"] for row in ordered]
    assert [line.get("part") for line in lines] == [row.get("part") for row in job["rows"][:-1]]  # other keys kept
    scored = tmp_path / "scored.json"  # the rows with references, as speech_to_text_eval.py scores a manifest
    scored.write_text("".join(json.dumps(line) + "\n" for line in lines if "text" in line))
    _, total, metric = cal_write_wer(pred_manifest=str(scored))
    with_reference = [row for row in ordered if row["reference_text"]]
    assert metric == "wer" and len(with_reference) == 7
    expected = jiwer.wer([row["reference_text"] for row in with_reference], [row["text"] for row in with_reference])
    assert total["samples"] == 7 and total["wer"] == pytest.approx(expected) and 0 < expected < 1


def test_the_ctm_is_nists_format_and_scores_to_the_parquets_wer(job):
    import jiwer

    lines = (job["exports"] / "ctm" / "transcripts.ctm").read_text(encoding="utf-8").splitlines()
    fields = []
    for line in lines:
        match = CTM_LINE.match(line)
        assert match, line
        fields.append((match.group(1), match.group(2), float(match.group(3)), float(match.group(4)), match.group(5)))
    assert fields == sorted(fields, key=lambda f: (f[0], f[1], f[2]))  # as sclite and hubscr read it
    assert {f[1] for f in fields} == {"1"}
    recordings = recordings_of(job["output"])
    hypotheses = {name: [f[4] for f in fields if f[0] == name] for name in recordings}
    for name, rows in recordings.items():
        assert [(f[2], f[3]) for f in fields if f[0] == name] == [
            (round(start, 3), round(round(end, 3) - round(start, 3), 3)) for _, start, end in timed_words(rows)]
    scored = [(rows[0]["reference_text"], name, rows[0]["text"]) for name, rows in recordings.items()
              if rows[0]["reference_text"]]
    assert len(scored) == 7
    references = [reference for reference, _, _ in scored]
    ctm_wer = jiwer.wer(references, [" ".join(hypotheses[name]) for _, name, _ in scored])
    parquet_wer = jiwer.wer(references, [text for _, _, text in scored])
    assert ctm_wer == pytest.approx(parquet_wer) and 0 < parquet_wer < 1


def test_the_export_command_takes_other_cue_rules_and_another_folder(job, tmp_path):
    import srt

    result = subprocess.run([sys.executable, str(REPOSITORY / "jobs" / "export.py"), str(job["output"]), "--format",
                             "srt", "txt", "--to", str(tmp_path / "narrow"), "--max-line-chars", "16",
                             "--max-lines", "1"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"-> {tmp_path / 'narrow'}" in result.stdout and "1 error rows not exported" in result.stderr
    assert "Traceback" not in result.stderr
    for path in (tmp_path / "narrow" / "srt").iterdir():
        for subtitle in srt.parse(path.read_text()):
            assert "\n" not in subtitle.content and (len(subtitle.content) <= 16 or " " not in subtitle.content)
    assert sorted(p.name for p in (tmp_path / "narrow").iterdir()) == ["_errors.tsv", "srt", "txt"]


def test_an_export_goes_to_object_storage(job, s3):
    import fsspec

    from jobs.export import main
    from tests.support.s3_server import create_bucket

    create_bucket("subtitles")
    assert main([str(job["output"]), "--format", "vtt", "nemo", "--to", "s3://subtitles/run"]) == 0
    filesystem = fsspec.filesystem("s3")
    filesystem.invalidate_cache()
    written = sorted(path.split("subtitles/run/", 1)[1] for path in filesystem.find("subtitles/run"))
    assert written == sorted(["_errors.tsv", "nemo/transcripts.json",
                              *(f"vtt/{name}.vtt" for name in recordings_of(job["output"]))])
    assert filesystem.cat_file("subtitles/run/nemo/transcripts.json").decode() == (
        job["exports"] / "nemo" / "transcripts.json").read_text()


def test_an_unfinished_output_is_refused_unless_asked(job, tmp_path):
    unfinished = tmp_path / "unfinished"
    shutil.copytree(job["output"], unfinished, ignore=shutil.ignore_patterns("_exports"))
    (unfinished / "_SUCCESS").unlink()
    command = [sys.executable, str(REPOSITORY / "jobs" / "export.py"), str(unfinished), "--format", "txt"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"loopscribe: {unfinished} has no _SUCCESS" in result.stderr and "--incomplete" in result.stderr
    assert not (unfinished / "_exports").exists()
    result = subprocess.run([*command, "--incomplete"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and len(list((unfinished / "_exports" / "txt").iterdir())) == 8


def test_the_export_setting_is_declared_once_and_is_not_part_of_the_outputs_identity():
    from jobs import transcribe
    from pipeline.config import TranscribeJobConfig, config_from_dict
    from pipeline.exports import FORMATS as EXPORT_FORMATS
    from pipeline.settings import declared

    (declaration,) = [d for key, _, d, _ in declared(TranscribeJobConfig) if key == "export"]
    assert declaration.choices == EXPORT_FORMATS == FORMATS
    config = transcribe.config_from_args(transcribe.parser().parse_args(["--export", "srt", "ctm", "--export-to",
                                                                         "s3://b/x"]))
    assert config.export == ("srt", "ctm") and config.export_to == "s3://b/x"
    assert config.results_identity() == config_from_dict({}).results_identity()
    assert transcribe.export_config(config_from_dict({})) is None
    with pytest.raises(SystemExit, match="invalid configuration: export: unknown export format 'docx'"):
        transcribe.export_config(config_from_dict({"export": ["srt", "docx"]}))
    with pytest.raises(SystemExit):  # argparse refuses it too
        transcribe.parser().parse_args(["--export", "docx"])
