"""The run report (`pipeline/reports/run.py`) of a real job, and the Ray metrics its writers count
(`pipeline/metrics.py`).

One job on the session's Ray transcribes, with the bundled model, the quickstart's 20 samples (with references), 16
utterances of the domain set (with references) among bad rows of known causes (missing, corrupt and empty audio,
malformed lines, negative durations), and 4 samples without references, three manifests in all. Then:
- `_report.md` is written with every PNG it names (read back by Pillow);
- each stage's busy seconds are positive and fit in its workers' wall time;
- error rows are counted by cause, the counts known from how the corpus was made;
- WER and CER, overall and per manifest, are what jiwer gives the Parquet's texts (normalised and as written), and
  the worst utterances are those with the most word errors;
- the writers' Ray metrics add up to what the driver counted (scraped from the node's metrics agent);
- a rerun that finds everything committed still writes the report of the whole output.
The report's parts are also checked on their own, without Ray: the throughput curve's bound, error causes in order
with their examples, references that do not count, Markdown cells, and a report that cannot be written.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline import schema
from pipeline.config import ModelConfig, ResourcesConfig, TranscribeJobConfig
from pipeline.io import sink
from pipeline.reports import run
from tests.pipeline.test_metrics import wait_for_totals


def job_test(test):
    """A test of the job's output: it needs Ray and NeMo, and takes a minute and a half."""
    for mark in (pytest.mark.ray, pytest.mark.nemo, pytest.mark.slow):
        test = mark(test)
    return test


REPOSITORY = Path(__file__).resolve().parents[3]
SAMPLES = REPOSITORY / "samples"
BUNDLED_MODEL = REPOSITORY / "models" / "demo_hybrid_rnnt_ctc.nemo"
RESOURCES = ResourcesConfig(device="cpu", asr_actors=1, audio_actors=1, writer_actors=1, part_rows=8, torch_threads=1)
DOMAIN_ROWS = 16
# the error rows of domain.json, by the cause the report must give them: (cause, rows)
CAUSES = {"file not found": 3, "malformed JSON": 2, "'duration' must not be negative, got N": 2, "empty file": 1,
          "no audio frames": 1}


def absolute(rows: list[dict], folder: Path) -> list[dict]:
    return [dict(row, audio_filepath=str(folder / row["audio_filepath"])) for row in rows]


@pytest.fixture(scope="module")
def job(ray_cluster, tmp_path_factory):
    from pipeline.graph import run_transcription

    root = tmp_path_factory.mktemp("run_report")
    quickstart = absolute([json.loads(line) for line in (SAMPLES / "manifest.json").read_text().splitlines()],
                          SAMPLES)
    domain = absolute([json.loads(line) for line in (SAMPLES / "domain" / "test.json").read_text().splitlines()
                       ][:DOMAIN_ROWS], SAMPLES / "domain")
    (root / "corrupt.flac").write_bytes((SAMPLES / "sample01.flac").read_bytes()[:300])
    (root / "empty.wav").write_bytes(b"")
    bad = [json.dumps({"audio_filepath": str(root / "gone1.flac"), "duration": 1.0, "text": "never heard"}),
           json.dumps({"audio_filepath": str(root / "gone2.flac"), "duration": 1.0, "text": "never heard either"}),
           json.dumps({"audio_filepath": str(root / "sub" / "gone3.wav"), "duration": 2.5}),
           '{"audio_filepath": "x.wav", "duration": ',
           '{"audio_filepath": "y.wav", "duration": 1,,}',
           json.dumps({"audio_filepath": quickstart[0]["audio_filepath"], "duration": -1.0}),
           json.dumps({"audio_filepath": quickstart[1]["audio_filepath"], "duration": -2.5}),
           json.dumps({"audio_filepath": str(root / "empty.wav"), "duration": 1.0}),
           json.dumps({"audio_filepath": str(root / "corrupt.flac"), "duration": 1.0})]
    lines = [json.dumps(row) for row in domain]
    for position, line in zip(range(1, 2 * len(bad), 2), bad):
        lines.insert(position, line)
    manifests = {"quickstart.json": [json.dumps(row) for row in quickstart],
                 "domain.json": lines,
                 "no_text.json": [json.dumps({"audio_filepath": str(SAMPLES / f"sample{i}.flac"), "duration": 2.0})
                                  for i in range(10, 14)]}
    for name, manifest_lines in manifests.items():
        (root / name).write_text("\n".join(manifest_lines) + "\n")
    config = TranscribeJobConfig(manifests=[str(root / name) for name in manifests], output=str(root / "out"),
                                 model=ModelConfig(uri=str(BUNDLED_MODEL), cache_dir=str(root / "cache")),
                                 resources=RESOURCES)
    started = time.monotonic()
    summary = run_transcription(config, progress=lambda done: None)
    wall_s = time.monotonic() - started
    return {"summary": summary, "wall_s": wall_s, "output": root / "out", "config": config, "root": root,
            "manifests": {name: str(root / name) for name in manifests}}


@job_test
def test_the_report_is_written_with_every_plot_it_names(job):
    from PIL import Image

    report = (job["output"] / "_report.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert len(images) == 2
    for name in images:
        with Image.open(job["output"] / name) as image:
            assert image.format == "PNG" and image.width > 300 and image.height > 200
            image.verify()
    assert job["summary"]["report"]["file"] == f"{job['output']}/_report.md"
    on_disk = json.loads((job["output"] / sink.SUMMARY_FILE).read_text())
    assert on_disk == json.loads(json.dumps(job["summary"]))  # the figures in _summary.json are the ones returned
    assert sink.is_complete(str(job["output"])) and not list(job["output"].glob("*.writing"))


@job_test
def test_each_stages_busy_time_is_positive_and_fits_in_its_workers_time(job):
    stages = job["summary"]["report"]["stages"]
    assert list(stages) == ["reading", "audio", "encoder", "decoding", "writing"]
    workers = {"reading": 3, "audio": 1, "encoder": 1, "decoding": 1, "writing": 1}  # 3 manifests, a task each
    assert {stage: times["workers"] for stage, times in stages.items()} == workers
    for stage, times in stages.items():
        assert 0 < times["busy_s"] <= job["wall_s"] * workers[stage], stage
        assert times["busy_share"] == pytest.approx(times["busy_s"] / (job["summary"]["this_run"]["wall_s"]
                                                                       * workers[stage]))
    assert stages["encoder"]["busy_s"] + stages["decoding"]["busy_s"] <= job["wall_s"]  # one ASR actor
    assert {stage: times["busy_s"] for stage, times in stages.items()} == job["summary"]["this_run"]["busy_s"]
    points = job["summary"]["report"]["throughput"]
    assert len(points) == job["summary"]["this_run"]["parts"] >= 5
    assert [p["rows"] for p in points] == sorted(p["rows"] for p in points) and points[-1]["rows"] == 49
    assert points[-1]["audio_s"] == pytest.approx(job["summary"]["this_run"]["audio_hours"] * 3600)
    assert 0 < points[0]["wall_s"] <= points[-1]["wall_s"] <= job["wall_s"]


@job_test
def test_error_rows_are_counted_by_cause_with_examples(job):
    causes = job["summary"]["report"]["errors_by_cause"]
    assert {c["cause"]: c["rows"] for c in causes} == CAUSES
    assert [c["rows"] for c in causes] == sorted((c["rows"] for c in causes), reverse=True)
    domain = job["manifests"]["domain.json"]
    for cause in causes:
        assert 1 <= len(cause["examples"]) == min(3, cause["rows"])
        assert all(re.match(rf"{re.escape(domain)}, line \d+: ", example) for example in cause["examples"])
    report = (job["output"] / "_report.md").read_text()
    for cause, rows in CAUSES.items():
        assert re.search(rf"^\| {re.escape(cause)} \| {rows} \| ", report, re.MULTILINE), cause


def per_utterance_word_errors(references: list[str], texts: list[str]) -> list[int]:
    import jiwer

    from pipeline.lm.text import plain_text

    counts = []
    for reference, text in zip(references, texts):
        words = jiwer.process_words(plain_text(reference), plain_text(text))
        counts.append(words.substitutions + words.deletions + words.insertions)
    return counts


@job_test
def test_wer_and_cer_overall_and_per_manifest_are_jiwers_on_the_transcripts(job):
    import jiwer

    from pipeline.lm.text import plain_text

    rows = [row for row in sink.read_output(str(job["output"])).to_pylist()
            if row[schema.STATUS] == schema.STATUS_OK and row[schema.REFERENCE_TEXT]]
    scores = job["summary"]["report"]["scores"]
    by_manifest = {m["manifest"]: m for m in scores["by_manifest"]}
    assert sorted(by_manifest) == sorted([job["manifests"]["quickstart.json"], job["manifests"]["domain.json"]])
    groups = {"all": rows, **{uri: [r for r in rows if r[schema.MANIFEST] == uri] for uri in by_manifest}}
    assert len(groups[job["manifests"]["domain.json"]]) == DOMAIN_ROWS and len(groups["all"]) == 20 + DOMAIN_ROWS
    for name, chosen in groups.items():
        figures = scores if name == "all" else by_manifest[name]
        references, texts = [r[schema.REFERENCE_TEXT] for r in chosen], [r[schema.TEXT] for r in chosen]
        plain_references, plain_texts = [plain_text(r) for r in references], [plain_text(t) for t in texts]
        assert figures["utterances"] == len(chosen)
        assert figures["wer"] == pytest.approx(jiwer.wer(plain_references, plain_texts))
        assert figures["cer"] == pytest.approx(jiwer.cer(plain_references, plain_texts))
        assert figures["written_wer"] == pytest.approx(jiwer.wer(references, texts))
        assert figures["written_cer"] == pytest.approx(jiwer.cer(references, texts))
    assert 0 < scores["wer"] < 1  # the demo model on its own domain: neither perfect nor nonsense
    assert scores["error_rows_with_reference"] == 2
    errors = per_utterance_word_errors([r[schema.REFERENCE_TEXT] for r in rows], [r[schema.TEXT] for r in rows])
    worst = scores["worst"]
    assert 0 < len(worst) <= 10 and [w["word_errors"] for w in worst] == sorted(errors, reverse=True)[:len(worst)]
    by_line = {(r[schema.MANIFEST], r[schema.LINE]): e for r, e in zip(rows, errors)}
    assert all(by_line[(w["manifest"], w["line"])] == w["word_errors"] for w in worst)
    report = (job["output"] / "_report.md").read_text()
    assert f"WER {scores['wer']:.1%} (as written {scores['written_wer']:.1%})" in report
    domain = job["manifests"]["domain.json"]
    assert f"| {domain} | {DOMAIN_ROWS} | {by_manifest[domain]['wer']:.1%}" in report


@job_test
def test_the_writers_counted_the_runs_parts_in_ray_metrics(job):
    from pipeline.metrics import AUDIO_SECONDS, BUSY_SECONDS, ERROR_ROWS, PARTS, ROWS, exported_name

    this_run = job["summary"]["this_run"]
    found = wait_for_totals(str(job["output"]),
                            lambda found: found.get((exported_name(ROWS), None)) == this_run["rows"])
    assert found[(exported_name(PARTS), None)] == this_run["parts"]
    assert found[(exported_name(ROWS), None)] == this_run["rows"] == 49
    assert found[(exported_name(ERROR_ROWS), None)] == this_run["rows_error"] == sum(CAUSES.values())
    assert found[(exported_name(AUDIO_SECONDS), None)] == pytest.approx(this_run["audio_hours"] * 3600)
    for stage, times in job["summary"]["report"]["stages"].items():
        assert found[(exported_name(BUSY_SECONDS), stage)] == pytest.approx(times["busy_s"]), stage


@job_test
def test_a_rerun_with_nothing_left_reports_the_whole_output(job, tmp_path):
    import dataclasses

    from pipeline.graph import run_transcription

    output = tmp_path / "out"
    shutil.copytree(job["output"], output)
    (output / "_report.md").unlink()
    summary = run_transcription(dataclasses.replace(job["config"], output=str(output)), progress=lambda done: None)
    assert summary["this_run"]["rows"] == 0
    report = summary["report"]
    assert report["throughput"] == [] and all(times["busy_s"] == 0 for times in report["stages"].values())
    assert report["errors_by_cause"] == job["summary"]["report"]["errors_by_cause"]
    assert report["scores"]["wer"] == job["summary"]["report"]["scores"]["wer"]
    assert "No error rows" not in (output / "_report.md").read_text()


def test_the_throughput_curve_keeps_at_most_its_bound_of_points_the_first_and_last_among_them():
    parts = [{schema.COMMITTED_AT: 1000.0 + i, schema.AUDIO_S: 2.0, schema.ROWS: 3} for i in reversed(range(1000))]
    points = run.throughput(parts, started_at=1000.0)
    assert len(points) == run.THROUGHPUT_POINTS
    assert points[0] == {"wall_s": 0.0, "audio_s": 2.0, "rows": 3} and points[-1] == {"wall_s": 999.0,
                                                                                       "audio_s": 2000.0, "rows": 3000}
    assert [p["wall_s"] for p in points] == sorted(p["wall_s"] for p in points)


def output_rows(rows: list[dict]) -> pa.Table:
    columns = (schema.UTTERANCE_ID, schema.MANIFEST, schema.LINE, schema.STATUS, schema.ERROR, schema.REFERENCE_TEXT,
               schema.TEXT)
    return pa.Table.from_pylist([{name: row.get(name) for name in columns} for row in rows],
                                schema=pa.schema([schema.OUTPUT_SCHEMA.field(name) for name in columns]))


def test_error_causes_come_most_frequent_first_with_examples_in_manifest_order():
    rows = [{schema.STATUS: schema.STATUS_ERROR, schema.MANIFEST: "b.json", schema.LINE: line,
             schema.ERROR: f"b.json, line {line}: /audio/x{line}.wav: file not found"} for line in (9, 2, 5, 7)]
    rows += [{schema.STATUS: schema.STATUS_ERROR, schema.MANIFEST: "a.json", schema.LINE: 4,
              schema.ERROR: "a.json, line 4: 'duration' must not be negative, got -1.5"},
             {schema.STATUS: schema.STATUS_ERROR, schema.MANIFEST: "a.json", schema.LINE: 8, schema.ERROR: None},
             {schema.STATUS: schema.STATUS_OK, schema.MANIFEST: "a.json", schema.LINE: 1, schema.ERROR: ""}]
    causes = run.errors_by_cause(output_rows(rows))
    assert [(c["cause"], c["rows"]) for c in causes] == [
        ("file not found", 4), ("'duration' must not be negative, got N", 1), ("(no cause recorded)", 1)]
    assert causes[0]["examples"] == [f"b.json, line {line}: /audio/x{line}.wav: file not found" for line in (2, 5, 7)]


def test_only_ok_rows_with_a_reference_are_scored():
    rows = [{schema.STATUS: schema.STATUS_OK, schema.MANIFEST: "a.json", schema.LINE: 1, schema.REFERENCE_TEXT: ref,
             schema.TEXT: "a b"} for ref in (None, "", "  ")]
    assert run.scores(output_rows(rows)) is None
    rows += [{schema.STATUS: schema.STATUS_OK, schema.MANIFEST: "a.json", schema.LINE: 5, schema.UTTERANCE_ID: "u5",
              schema.REFERENCE_TEXT: "A b c.", schema.TEXT: "a b"},
             {schema.STATUS: schema.STATUS_ERROR, schema.MANIFEST: "a.json", schema.LINE: 6,
              schema.REFERENCE_TEXT: "x", schema.ERROR: "a.json, line 6: empty file"}]
    scores = run.scores(output_rows(rows))
    assert (scores["utterances"], scores["wer"], scores["written_wer"]) == (
        1, pytest.approx(1 / 3), pytest.approx(2 / 3))
    assert scores["error_rows_with_reference"] == 1
    assert scores["worst"] == [{"manifest": "a.json", "line": 5, "utterance_id": "u5", "word_errors": 1,
                                "reference_words": 3, "reference": "A b c.", "text": "a b"}]


def test_a_markdown_cell_is_one_line_with_its_pipes_escaped_and_cut():
    assert run.cell("a | b\nc") == "a \\| b c"
    assert len(run.cell("x" * 1000)) == run.EXAMPLE_CHARS and run.cell(None) == ""


def test_a_report_that_cannot_be_written_is_one_warning_and_leaves_the_summary(tmp_path, caplog):
    (tmp_path / "out").write_text("a file where the output folder should be")
    summary = {"rows": 0, "this_run": {"wall_s": 1.0}}
    with caplog.at_level(logging.WARNING):
        assert run.write_run_report(TranscribeJobConfig(output=str(tmp_path / "out")), summary, [], 0.0) is summary
    assert [record.getMessage().split(" (")[0] for record in caplog.records] == [
        "loopscribe: the run report could not be written"]


def test_the_report_goes_to_object_storage_beside_the_parts(s3):
    """An output on S3 (the session's moto server): the report, its plots and the summary with its figures are
    written there; `_summary.json` is replaced whole."""
    import s3fs

    from pipeline.stages.rows import summarize
    from tests.support.s3_server import create_bucket

    create_bucket("report")
    output = "s3://report/job/out"
    rows = {schema.UTTERANCE_ID: ["u1", "u2"], schema.MANIFEST: ["s3://report/m.json"] * 2, schema.LINE: [1, 2],
            schema.STATUS: [schema.STATUS_OK, schema.STATUS_ERROR], schema.REFERENCE_TEXT: ["one two", "three"],
            schema.TEXT: ["one too", None],
            schema.ERROR: ["", "s3://report/m.json, line 2: s3://report/a.wav: empty file"]}
    part_name = sink.write_part(output, sink.to_output_table(rows))
    parts = [{schema.PART: part_name, schema.ROWS: 2, schema.ROWS_OK: 1, schema.ROWS_ERROR: 1, schema.AUDIO_S: 3.0,
              schema.PADDED_S: 3.0, schema.READ_BUSY_S: 0.01, schema.AUDIO_BUSY_S: 0.1, schema.ENCODER_BUSY_S: 0.5,
              schema.DECODING_BUSY_S: 0.2, schema.FINISH_S: 0.05, schema.COMMITTED_AT: 1005.0}]
    summary = {"rows": 2, "rows_ok": 1, "rows_error": 1, "this_run": summarize(parts, 1000.0), "model_id": "m",
               "decoding": "greedy", "device": "cpu"}
    sink.mark_success(output, summary)
    written = run.write_run_report(TranscribeJobConfig(output=output), summary, parts, 1000.0)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    assert json.loads(fs.cat_file("report/job/out/_summary.json")) == json.loads(json.dumps(written))
    assert written["report"]["scores"]["wer"] == pytest.approx(0.5)
    assert [c["cause"] for c in written["report"]["errors_by_cause"]] == ["empty file"]
    report = fs.cat_file("report/job/out/_report.md").decode()
    for name in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report):
        assert fs.cat_file(f"report/job/out/{name}")[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [path for path in fs.ls("report/job/out") if path.endswith(".writing")]
