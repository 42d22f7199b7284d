"""One kind of results per output, decided atomically; a model is its content.

On an in-process Ray: two jobs of different decodings started a second apart into one new output, with the model
served slowly over http from 127.0.0.1 (its fetch takes seconds, as a multi-GB `.nemo`'s does), so that both have
passed every check before either claims the output. Exactly one is refused, in one line naming the setting that
differs; every row, `_config.json` and `_summary.json` are of the other's decoding. Then the model is replaced at
its URL, and at a local path (rewritten in place, the same size, its mtime put back): a rerun into the output is
refused, naming the model's content, before it transcribes anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from pipeline import schema
from pipeline.config import BUNDLED_MODEL, BUNDLED_TDT_MODEL, ModelConfig, ResourcesConfig, TranscribeJobConfig
from pipeline.decoding.plan import DecodingConfig
from pipeline.io import claim, sink

pytestmark = [pytest.mark.ray, pytest.mark.nemo]

REPOSITORY = Path(__file__).resolve().parents[2]
SAMPLES = REPOSITORY / "samples"
ROWS = 4
FETCH_S = 4.0  # how long the slow server takes to send the model, to each job
RESOURCES = ResourcesConfig(device="cpu", asr_actors=1, audio_actors=1, writer_actors=1, window_rows=8, part_rows=2,
                            torch_threads=1)


def manifest(tmp_path: Path) -> str:
    lines = (SAMPLES / "manifest.json").read_text().splitlines()[:ROWS]
    rows = [dict(json.loads(line), audio_filepath=str(SAMPLES / json.loads(line)["audio_filepath"])) for line in lines]
    path = tmp_path / "manifest.json"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def job(manifest_uri: str, output: str, model_uri: str, cache_dir: Path, decoding: DecodingConfig
        ) -> TranscribeJobConfig:
    return TranscribeJobConfig(manifests=(manifest_uri,), output=output, decoding=decoding, resources=RESOURCES,
                               model=ModelConfig(uri=model_uri, cache_dir=str(cache_dir)))


def test_two_decodings_racing_into_one_output_one_is_refused_and_a_replaced_model_too(ray_cluster, tmp_path):
    from pipeline.graph import OutputMismatchError, run_transcription
    from tests.support.file_server import serve_files

    model_bytes = BUNDLED_MODEL.read_bytes()
    output = str(tmp_path / "out")
    decodings = {"greedy": DecodingConfig(strategy="greedy"), "alsd": DecodingConfig(strategy="alsd", beam_size=2)}
    outcomes: dict[str, object] = {}
    with serve_files({"/models/latest.nemo": model_bytes}, bytes_per_s=len(model_bytes) / FETCH_S) as served:
        model_uri = f"{served.url}/models/latest.nemo"
        configs = {name: job(manifest(tmp_path), output, model_uri, tmp_path / f"cache-{name}", decoding)
                   for name, decoding in decodings.items()}  # two machines: each job downloads the model itself

        def run(name: str) -> None:
            try:
                outcomes[name] = run_transcription(configs[name], progress=lambda _: None)
            except Exception as error:  # noqa: BLE001 (the outcome is what the test looks at)
                outcomes[name] = error

        threads = [threading.Thread(target=run, args=(name,)) for name in decodings]
        started = time.monotonic()
        for thread in threads:
            thread.start()
            time.sleep(1.0)  # "started seconds apart": the second starts well inside the first's fetch
        for thread in threads:
            thread.join(timeout=240)
        assert not any(thread.is_alive() for thread in threads)
        assert time.monotonic() - started > FETCH_S  # the fetch was slow: both were fetching at once

        refused = {name: outcome for name, outcome in outcomes.items() if isinstance(outcome, OutputMismatchError)}
        assert len(refused) == 1, outcomes
        (loser, error), = refused.items()
        winner = next(name for name in decodings if name != loser)
        assert isinstance(outcomes[winner], dict), outcomes[winner]
        message = str(error)
        assert "\n" not in message and len(message) < 400, message
        assert (f'decoding.strategy is "{winner}" there, "{loser}" here' in message
                and message.startswith(f"{output} holds results of another model or decoding")), message

        # every row once, all of the winner's decoding; the metadata names it and the model's content
        table = sink.read_output(output)
        assert table.num_rows == ROWS and len(set(table.column(schema.UTTERANCE_ID).to_pylist())) == ROWS
        assert set(table.column(schema.STATUS).to_pylist()) == {schema.STATUS_OK}
        descriptions = set(table.column(schema.DECODING).to_pylist())
        assert len(descriptions) == 1 and descriptions.pop().startswith(winner), descriptions
        digest = hashlib.sha256(model_bytes).hexdigest()
        written = json.loads((tmp_path / "out" / sink.CONFIG_FILE).read_text())
        summary = json.loads((tmp_path / "out" / sink.SUMMARY_FILE).read_text())
        assert written["identity"]["decoding"]["strategy"] == winner and summary["decoding"].startswith(winner)
        assert written["model_sha256"] == summary["model_sha256"] == digest
        assert written["identity"]["model"]["content_sha256"] == digest
        assert written["config"]["model"]["sha256"] == digest  # the stages' model pinned to the content claimed
        assert claim.read_identity(output)["identity"]["decoding"]["strategy"] == winner
        assert sorted(json.loads((tmp_path / "out" / sink.SUCCESS_FILE).read_text())["parts"]) == sorted(
            path.rsplit("/", 1)[-1] for path in sink.list_parts(output))

        # a nightly `latest.nemo` overwritten at its URL: another model, refused into this output
        replaced = BUNDLED_TDT_MODEL.read_bytes()
        assert len(replaced) == len(model_bytes) and replaced != model_bytes
        served.files["/models/latest.nemo"] = replaced
        served.bytes_per_s = None
        parts = sink.list_parts(output)
        with pytest.raises(OutputMismatchError, match=f"its model's content is sha256:{digest[:16]} there, "
                                                      f"sha256:{hashlib.sha256(replaced).hexdigest()[:16]} here"):
            run_transcription(configs[winner], progress=lambda _: None)
        assert sink.list_parts(output) == parts and sink.is_complete(output)


def test_a_local_model_rewritten_in_place_is_another_model(ray_cluster, tmp_path):
    """A model file rewritten at its path, the same size and its mtime put back (only its ctime tells): refused."""
    from pipeline.graph import OutputMismatchError, run_transcription

    model = tmp_path / "models" / "latest.nemo"
    model.parent.mkdir()
    shutil.copyfile(BUNDLED_MODEL, model)
    output = str(tmp_path / "out")
    config = job(manifest(tmp_path), output, str(model), tmp_path / "cache", DecodingConfig(strategy="greedy"))
    summary = run_transcription(config, progress=lambda _: None)
    assert summary["rows_ok"] == ROWS and summary["model_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()

    status = model.stat()
    with open(model, "r+b") as handle:
        handle.write(BUNDLED_TDT_MODEL.read_bytes())
    os.utime(model, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert model.stat().st_size == status.st_size and model.stat().st_ino == status.st_ino
    parts = sink.list_parts(output)
    with pytest.raises(OutputMismatchError, match="its model's content is sha256:.* there, sha256:.* here .a model "
                                                  "file replaced at the same path is another model"):
        run_transcription(config, progress=lambda _: None)
    assert sink.list_parts(output) == parts and sink.is_complete(output)
