"""Each stage's busy seconds (`schema.BUSY_S_BY_STAGE`), with the stages called directly (no Ray): every call's
wall time is shared among its rows, carried from stage to stage, and added up in the part's summary row, never
written into the transcripts; the ASR stage's encoder seconds are the time its model's `encode` took.

The model is a small random NeMo model (tests/conftest.py::nemo_assets).
"""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import schema
from pipeline.config import DecodingConfig, ModelConfig, ResourcesConfig
from pipeline.decoding.plan import plan_decoding
from pipeline.io import IdSet, sink
from pipeline.model.actor import load_model
from pipeline.model.nemo_file import read_model_facts
from pipeline.stages.asr import TranscribeBatch
from pipeline.stages.audio import LoadAudio
from pipeline.stages.read import ReadManifests
from pipeline.stages.write import FinishAndWrite

pytestmark = pytest.mark.nemo

UPSTREAM = (schema.READ_BUSY_S, schema.AUDIO_BUSY_S, schema.ENCODER_BUSY_S, schema.DECODING_BUSY_S)


def timed(call, *args):
    started = time.perf_counter()
    result = call(*args)
    return result, time.perf_counter() - started


class TimedEncode:
    """The model, whose `encode` also adds up how long each call took (what it returns is the model's own)."""

    def __init__(self, model) -> None:
        self.model, self.encode_s = model, 0.0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def encode(self, audio, lengths):
        started = time.perf_counter()
        try:
            return self.model.encode(audio, lengths)
        finally:
            self.encode_s += time.perf_counter() - started


@pytest.fixture(scope="module")
def stages(nemo_assets, tmp_path_factory):
    folder = tmp_path_factory.mktemp("busy")
    lines = [json.dumps({"audio_filepath": str(path), "duration": 9.0}) for path in nemo_assets["files"]]
    lines.insert(3, json.dumps({"audio_filepath": str(folder / "missing.wav"), "duration": 1.0}))
    (folder / "manifest.json").write_text("\n".join(lines) + "\n")
    model_config = ModelConfig(uri=str(nemo_assets["checkpoints"]["tdt_ctc"]))
    # a beam search: decoding takes as long as encoding, so that either counted as the other shows
    plan = plan_decoding(read_model_facts(model_config.uri), DecodingConfig(strategy="alsd", beam_size=4))
    model = TimedEncode(load_model(model_config, "cpu"))
    reader = ReadManifests(IdSet(), chunk_rows=4)
    tables, read_s = timed(lambda: list(reader(pa.table({schema.MANIFEST: [str(folder / "manifest.json")]}))))
    audio = [timed(LoadAudio(sample_rate=16000), table) for table in tables]
    asr = TranscribeBatch(model_config, plan, ResourcesConfig(batch_audio_s=12.0), load=lambda *_: model)
    asr(audio[0][0])  # the model's loading and first call out of the way
    model.encode_s = 0.0
    audio_rows = pa.concat_tables([table for table, _ in audio])
    decoded, asr_s = timed(asr, audio_rows)
    writer = FinishAndWrite(model_config, plan, str(folder / "out"), "test-model")
    writer(decoded.slice(0, 1))  # the layout's loading out of the way (an earlier part of the same job)
    halves = [decoded.slice(0, 3), decoded.slice(3)]  # the writer's batches are not the stages' calls
    summaries = [timed(writer, half) for half in halves]
    return {"tables": tables, "read_s": read_s, "audio": audio, "decoded": decoded, "asr_s": asr_s,
            "encode_s": model.encode_s, "summaries": summaries, "output": str(folder / "out"), "halves": halves}


def test_each_stage_shares_its_calls_time_among_the_calls_rows(stages):
    read_busy = [table.column(schema.READ_BUSY_S).to_pylist() for table in stages["tables"]]
    assert [len(values) for values in read_busy] == [4, 4, 1]  # 9 rows (one an error row) in tables of 4
    assert all(len(set(values)) == 1 and values[0] > 0 for values in read_busy)  # one call's time, shared equally
    assert 0 < sum(map(sum, read_busy)) <= stages["read_s"]
    for table, call_s in stages["audio"]:
        values = table.column(schema.AUDIO_BUSY_S).to_pylist()
        assert len(set(values)) == 1 and 0.8 * call_s <= sum(values) <= call_s
        assert table.column(schema.READ_BUSY_S).null_count == 0  # carried on
    decoded = stages["decoded"]
    encoder_s, decoding_s = (sum(decoded.column(name).to_pylist()) for name in (schema.ENCODER_BUSY_S,
                                                                                 schema.DECODING_BUSY_S))
    assert encoder_s > 0 and decoding_s > 0
    assert 0.8 * stages["asr_s"] <= encoder_s + decoding_s <= stages["asr_s"]


def test_the_encoders_seconds_are_the_time_its_model_spent_encoding(stages):
    encoder_s = sum(stages["decoded"].column(schema.ENCODER_BUSY_S).to_pylist())
    assert stages["encode_s"] <= encoder_s <= stages["encode_s"] * 1.02 + 0.05  # + padding the waveforms


def test_the_parts_summary_rows_add_up_the_rows_busy_seconds_and_the_writers(stages):
    for (summary, call_s), half in zip(stages["summaries"], stages["halves"]):
        row = summary.to_pylist()[0]
        for name in UPSTREAM:
            assert row[name] == pytest.approx(sum(half.column(name).to_pylist()))
        assert 0 < row[schema.FINISH_S] <= call_s
    totals = {name: sum(summary.column(name)[0].as_py() for summary, _ in stages["summaries"]) for name in UPSTREAM}
    assert totals[schema.READ_BUSY_S] == pytest.approx(
        sum(sum(table.column(schema.READ_BUSY_S).to_pylist()) for table in stages["tables"]))
    assert totals[schema.AUDIO_BUSY_S] == pytest.approx(
        sum(sum(table.column(schema.AUDIO_BUSY_S).to_pylist()) for table, _ in stages["audio"]))


def test_busy_seconds_never_reach_the_transcripts(stages):
    for path in sink.list_parts(stages["output"]):
        assert pq.read_schema(path).names == schema.OUTPUT_SCHEMA.names
