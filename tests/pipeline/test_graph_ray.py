"""The Ray pipeline end to end, against an S3 bucket served by moto on 127.0.0.1.

A corpus of 215 rows in two manifests (NeMo JSON-lines with relative and absolute audio paths, and a gzipped
Lhotse cut manifest with offsets), of which 10 are bad (missing file, corrupt, empty and non-audio files, a
malformed JSON line, missing keys, negative durations), goes through `run_transcription` on an in-process
Ray. Every input row must come out exactly once; good rows must carry the text and word timestamps that
decoding the same audio in-process gives; bad rows an error naming the manifest, line and cause. Then the
driver is started as a separate process, SIGKILLed after its first parts are committed, and the job run
again: every row must still be there exactly once, and the rerun must process only the rows not yet committed.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline import schema
from pipeline.config import DecodingConfig, ModelConfig, ResourcesConfig, TranscribeJobConfig
from pipeline.io import sink
from pipeline.io.audio import load_audio
from pipeline.io.manifest import read_manifest

pytestmark = [pytest.mark.ray, pytest.mark.nemo, pytest.mark.slow]

REPOSITORY = Path(__file__).resolve().parents[2]
BUCKET = "corpus"
GOOD_ROWS = 205
RESOURCES = ResourcesConfig(device="cpu", asr_actors=1, audio_actors=1, writer_actors=1, window_rows=32, part_rows=16,
                            batch_audio_s=40.0, torch_threads=1)


@pytest.fixture(scope="module")
def corpus(s3, nemo_assets):
    """Uploads audio, bad files, the model and two manifests to a bucket of the session's S3 server, which the
    session's Ray workers reach (tests/conftest.py); returns their URIs and the expected rows."""
    import s3fs

    from tests.support.s3_server import create_bucket

    create_bucket(BUCKET)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    files = nemo_assets["files"]
    for index, path in enumerate(files):
        fs.put(str(path), f"{BUCKET}/data/audio/u{index}.wav")
    fs.pipe(f"{BUCKET}/data/audio/corrupt.wav", files[0].read_bytes()[:40])
    fs.pipe(f"{BUCKET}/data/audio/empty.wav", b"")
    fs.pipe(f"{BUCKET}/data/audio/notes.wav", b"PK\x03\x04 a zip file, not audio" * 20)
    fs.put(str(nemo_assets["checkpoints"]["rnnt"]), f"{BUCKET}/models/rnnt.nemo")
    lines = []
    for index in range(GOOD_ROWS - 5):
        n = index % len(files)
        audio = f"audio/u{n}.wav" if index % 2 else f"s3://{BUCKET}/data/audio/u{n}.wav"  # relative or absolute
        lines.append(json.dumps({"id": f"line-{index}", "audio_filepath": audio, "duration": 3.0,
                                 "text": f"sentence {n}", "speaker": n}))  # ids tell apart lines of the same audio
    bad = [
        json.dumps({"audio_filepath": "audio/missing.wav", "duration": 1.0}),
        json.dumps({"audio_filepath": "audio/corrupt.wav", "duration": 1.0}),
        json.dumps({"audio_filepath": "audio/empty.wav", "duration": 1.0}),
        json.dumps({"audio_filepath": "audio/notes.wav", "duration": 1.0}),
        '{"audio_filepath": "audio/u1.wav", "duration": 2.0,,}',
        json.dumps({"audio_filepath": "audio/u1.wav"}),
        json.dumps({"duration": 2.0}),
        json.dumps({"audio_filepath": "audio/u2.wav", "duration": -2.0}),
    ]
    for position, line in zip((3, 50, 51, 99, 120, 150, 170, 199), bad):
        lines.insert(position, line)
    fs.pipe(f"{BUCKET}/data/manifest.json", ("\n".join(lines) + "\n").encode())
    cuts = []
    for index in range(5):
        cuts.append({"id": f"cut-{index}", "start": 0.25 * index, "duration": 1.0, "channel": 0,
                     "recording": {"id": f"rec-{index}", "sources": [{"type": "file", "channels": [0],
                                                                       "source": f"audio/u{index}.wav"}],
                                   "sampling_rate": 16000, "num_samples": 16000, "duration": 1.0},
                     "supervisions": [{"id": f"sup-{index}", "text": f"cut {index}"}]})
    cuts.append({"id": "cut-bad", "start": 0.0, "duration": 1.0, "recording": {"id": "r", "sources": []}})
    cuts.append({"id": "cut-negative", "start": -1.0, "duration": 1.0,
                 "recording": {"id": "r", "sources": [{"type": "file", "source": "audio/u0.wav"}]}})
    fs.pipe(f"{BUCKET}/data/cuts.jsonl.gz", gzip.compress("".join(json.dumps(c) + "\n" for c in cuts).encode()))
    manifests = (f"s3://{BUCKET}/data/manifest.json", f"s3://{BUCKET}/data/cuts.jsonl.gz")
    rows = [row for uri in manifests for row in read_manifest(uri)]
    assert len(rows) == 215 and len({r[schema.UTTERANCE_ID] for r in rows}) == 215
    return {"manifests": manifests, "model": f"s3://{BUCKET}/models/rnnt.nemo", "rows": rows}


def job_config(corpus, output, cache_dir, decoding=None):
    return TranscribeJobConfig(manifests=corpus["manifests"], output=output, decoding=decoding or DecodingConfig(),
                               model=ModelConfig(uri=corpus["model"], cache_dir=str(cache_dir)), resources=RESOURCES)


@pytest.fixture(scope="module")
def expected(corpus, nemo_assets):
    """What decoding each good row's audio in-process gives: text and (word, start, end)."""
    from pipeline.decoding.recognize import recognize
    from pipeline.model.nemo import load_asr_model

    model = load_asr_model(str(nemo_assets["checkpoints"]["rnnt"]))
    results, cache = {}, {}
    for row in corpus["rows"]:
        if row[schema.STATUS] != schema.STATUS_OK:
            continue
        key = (row[schema.AUDIO_FILEPATH].rsplit("/", 1)[-1], row[schema.OFFSET], row[schema.DURATION])
        if key not in cache:
            try:
                waveform = load_audio(row[schema.AUDIO_FILEPATH], 16000, row[schema.OFFSET],
                                      row[schema.DURATION]).samples
            except Exception as error:
                cache[key] = error
            else:
                transcript = recognize(model, [waveform])[0]
                cache[key] = (transcript.text, [(w.text, w.start_s, w.end_s) for w in transcript.words])
        results[row[schema.UTTERANCE_ID]] = cache[key]
    return results


def check_exactly_once(output, corpus, expected):
    table = sink.read_output(output)
    ids = table.column(schema.UTTERANCE_ID).to_pylist()
    assert len(ids) == len(set(ids)) == len(corpus["rows"])
    assert set(ids) == {r[schema.UTTERANCE_ID] for r in corpus["rows"]}
    errors = {}
    for row in table.to_pylist():
        want = expected.get(row[schema.UTTERANCE_ID])
        if isinstance(want, tuple):
            assert row[schema.STATUS] == schema.STATUS_OK, row[schema.ERROR]
            assert row[schema.TEXT] == want[0]
            assert [(w["word"], w["start"], w["end"]) for w in row[schema.WORDS]] == want[1]
        else:
            assert row[schema.STATUS] == schema.STATUS_ERROR and row[schema.TEXT] is None
            errors[(row[schema.MANIFEST].rsplit("/", 1)[-1], row[schema.LINE])] = row[schema.ERROR]
    return errors


def test_every_row_once_with_in_process_transcripts_and_clear_errors(ray_cluster, corpus, expected, tmp_path):
    from pipeline.graph import OutputMismatchError, run_transcription

    output = f"s3://{BUCKET}/out/complete"
    config = job_config(corpus, output, tmp_path / "cache")
    summary = run_transcription(config, progress=lambda _: None)
    errors = check_exactly_once(output, corpus, expected)
    assert summary["rows"] == 215 and summary["rows_error"] == len(errors) == 10
    assert summary["this_run"]["rows"] == 215 and summary["this_run"]["padding_efficiency"] > 0.5
    manifest = f"s3://{BUCKET}/data/manifest.json"
    causes = {4: "file not found", 51: "not decodable audio", 52: "empty file", 100: "not decodable audio",
              121: "malformed JSON", 151: "missing key 'duration'", 171: "missing key 'audio_filepath'",
              200: "must not be negative"}
    for line, cause in causes.items():
        message = errors[("manifest.json", line)]
        assert message.startswith(f"{manifest}, line {line}: ") and cause in message, message
    assert f"s3://{BUCKET}/data/audio/missing.wav: file not found" in errors[("manifest.json", 4)]
    assert "no file or url audio source" in errors[("cuts.jsonl.gz", 6)]
    assert "'start' must not be negative" in errors[("cuts.jsonl.gz", 7)]
    assert sink.is_complete(output)
    written = json.loads(sink.output_filesystem(output)[0].cat(f"{BUCKET}/out/complete/{sink.SUMMARY_FILE}"))
    assert written["rows_ok"] == 205 and written["model_id"].startswith("rnnt.nemo sha256:")

    # a rerun finds everything committed, transcribes nothing and writes nothing twice
    parts = sink.list_parts(output)
    again = run_transcription(config, progress=lambda _: None)
    assert again["this_run"]["rows"] == 0 and again["rows"] == 215 and sink.list_parts(output) == parts

    # rows of another decoding are never mixed into this output
    with pytest.raises(OutputMismatchError, match="another model or decoding"):
        run_transcription(job_config(corpus, output, tmp_path / "cache", DecodingConfig(strategy="ctc_greedy")))


def committed(output):
    sink.output_filesystem(output)[0].invalidate_cache()
    return set(sink.committed_ids(output))


def test_a_driver_killed_mid_run_then_rerun_ends_with_every_row_once(ray_cluster, corpus, expected, tmp_path):
    from pipeline.graph import run_transcription

    output = f"s3://{BUCKET}/out/killed"
    command = [sys.executable, str(REPOSITORY / "jobs" / "transcribe.py"), "--manifest", *corpus["manifests"],
               "--output", output, "--model", corpus["model"], "--cache-dir", str(tmp_path / "cache"),
               "--device", "cpu", "--audio-actors", "1", "--window-rows", "32", "--part-rows", "16",
               "--batch-audio-s", "40", "--torch-threads", "1", "--ray-address", ray_cluster]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not committed(output) and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.2)
        assert driver.poll() is None, driver.stderr.read().decode()[-3000:]
        assert not sink.is_complete(output)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    # Ray ends the dead driver's actors; wait until nothing more is committed
    before, stable_since = committed(output), time.monotonic()
    while time.monotonic() - stable_since < 5:
        time.sleep(0.5)
        now = committed(output)
        if now != before:
            before, stable_since = now, time.monotonic()
    assert 0 < len(before) < 215

    summary = run_transcription(job_config(corpus, output, tmp_path / "cache"), progress=lambda _: None)
    assert summary["this_run"]["rows"] == 215 - len(before)  # only the unfinished rows were transcribed
    assert summary["duplicates_removed"] == 0
    check_exactly_once(output, corpus, expected)
    assert sink.is_complete(output)


class _WhoLoads:
    """Stands in for the audio stage: which actor got which rows.

    It takes 0.1 s a batch, as fetching and decoding audio takes time: an instant stand-in is done before the
    reader's next block exists, and the pool can then hand every block to the same idle actor (a CI run once saw
    one actor get all 400 rows)."""

    def __call__(self, table):
        import pyarrow as pa

        time.sleep(0.1)
        return pa.table({"pid": [os.getpid()], "ids": [table.column(schema.UTTERANCE_ID).to_pylist()]})


@pytest.mark.parametrize("spare_cpus", [1.9, 0.9])
def test_one_manifests_rows_reach_every_audio_actor_in_small_blocks(ray_cluster, tmp_path, spare_cpus,
                                                                   monkeypatch):
    from ray.data import ActorPoolStrategy, DataContext

    from pipeline.graph import read_rows
    from pipeline.stages.audio import LoadAudio

    manifest = tmp_path / "one_big_manifest.json"
    manifest.write_text("".join(json.dumps({"audio_filepath": f"audio/{i}.wav", "duration": 2.0}) + "\n"
                                for i in range(400)))
    config = TranscribeJobConfig(manifests=(str(manifest),), output=str(tmp_path / "out"))
    # both actors up before any rows go out, so that "one actor did it all" can only mean one block
    monkeypatch.setattr(DataContext.get_current(), "wait_for_min_actors_s", 120)
    rows = read_rows(config, [str(manifest)], spare_cpus).map_batches(
        _WhoLoads, batch_size=LoadAudio.BATCH_ROWS, batch_format="pyarrow", compute=ActorPoolStrategy(size=2),
        num_cpus=0.25).take_all()
    ids = [i for row in rows for i in row["ids"]]
    assert len(ids) == len(set(ids)) == 400
    actors = {row["pid"] for row in rows}
    if spare_cpus >= 1:
        assert len(actors) == 2  # both audio actors work on the one manifest
    else:  # without a CPU for the split: the whole manifest is one block, for one actor (documented)
        assert len(actors) == 1


def test_manifests_are_read_while_the_jobs_actors_hold_every_cpu(ray_cluster, tmp_path, monkeypatch):
    """A host died (tests/cluster (b1)): Ray reruns the read tasks it lost on the hosts left, where the job's
    actors, restarted there, can hold every CPU. A read that asks for CPU then waits forever; it must not."""
    import ray
    from ray.data import ActorPoolStrategy, DataContext

    from pipeline.graph import read_rows
    from pipeline.stages.audio import LoadAudio

    manifests = []
    for index in range(2):
        manifests.append(tmp_path / f"m{index}.json")
        manifests[-1].write_text("".join(json.dumps({"audio_filepath": f"audio/{index}-{i}.wav", "duration": 2.0})
                                         + "\n" for i in range(40)))
    config = TranscribeJobConfig(manifests=tuple(map(str, manifests)), output=str(tmp_path / "out"))
    monkeypatch.setattr(DataContext.get_current(), "execution_no_progress_timeout_s", 60)  # a hang fails
    every_cpu = ray.cluster_resources()["CPU"]
    rows = read_rows(config, [str(m) for m in manifests], spare_cpus=0.0).map_batches(
        _WhoLoads, batch_size=LoadAudio.BATCH_ROWS, batch_format="pyarrow", compute=ActorPoolStrategy(size=1),
        num_cpus=every_cpu).take_all()
    ids = [i for row in rows for i in row["ids"]]
    assert len(ids) == len(set(ids)) == 80


class _NiceAudio:
    """The audio stage with its priority lowered as the job asks (`resources.side_stage_nice`); each call says
    at which niceness the thread that ran it was."""

    def __init__(self, nice_steps: int) -> None:
        from pipeline.stages.audio import LoadAudio

        self.stage = LoadAudio(16_000, nice_steps=nice_steps)

    def __call__(self, table):
        import threading

        import pyarrow as pa

        rows = self.stage(table)  # the files do not exist: error rows
        return pa.table({"nice": [os.getpriority(os.PRIO_PROCESS, threading.get_native_id())],
                         "rows": [rows.num_rows]})


def test_the_audio_actor_runs_its_calls_at_the_lowered_priority(ray_cluster, tmp_path):
    """Steps below Ray's own worker niceness (a level under it would change nothing), on the thread the actor's
    calls run on: Ray Data runs them on a thread other than the constructor's, and Linux keeps a niceness per
    thread."""
    import ray
    from ray.data import ActorPoolStrategy

    from pipeline.graph import read_rows
    from pipeline.stages.audio import LoadAudio

    workers = ray.get(ray.remote(lambda: os.getpriority(os.PRIO_PROCESS, 0)).remote())  # Ray's worker niceness
    manifest = tmp_path / "m.json"
    manifest.write_text("".join(json.dumps({"audio_filepath": f"audio/{i}.wav", "duration": 2.0}) + "\n"
                                for i in range(40)))
    config = TranscribeJobConfig(manifests=(str(manifest),), output=str(tmp_path / "out"))
    rows = read_rows(config, [str(manifest)], spare_cpus=0.0).map_batches(
        _NiceAudio, fn_constructor_kwargs={"nice_steps": 2}, batch_size=LoadAudio.BATCH_ROWS, batch_format="pyarrow",
        compute=ActorPoolStrategy(size=1), num_cpus=0.25).take_all()
    assert sum(row["rows"] for row in rows) == 40
    assert {row["nice"] for row in rows} == {min(19, workers + 2)}
    assert workers < 18  # else the test would not tell the steps from the floor
    assert os.getpriority(os.PRIO_PROCESS, 0) == 0  # the driver's own priority is untouched
