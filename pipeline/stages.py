"""The transcription job's stages: small callable classes that know nothing about Ray.

`pipeline/graph.py` wires them with Ray Data; a test builds one with a model and calls it with a
`pyarrow.Table`, no cluster needed. Rows flow through every stage whatever happens to them: a row that fails
(unreadable manifest line, missing or corrupt audio, a decoding error) gets `status = error` and an `error`
naming the manifest, line and cause, and is written like any other row. Nothing raises per row.

1. `ReadManifests` (CPU): manifest URIs -> one row per line, minus the rows an earlier run already committed.
2. `LoadAudio` (CPU): fetch, decode, mix down, slice and resample each row's audio -> `samples`.
3. `TranscribeBatch` (GPU, or CPU with fractional CPUs): a window of rows -> length buckets -> encoder and
   decoding -> token ids with frames (or, where the plan has the writer search, compact blank-collapsed CTC
   log-probs).
4. `FinishAndWrite` (CPU): the writer's search where the plan has one (CTC beam search), detokenization and
   word timestamps, then one atomic Parquet part per batch (`pipeline/sink.py`) -> one summary row per part,
   which the driver counts.

Both decoding stages get the job's `DecodingPlan` (`pipeline/decoding.py`), made once by the driver, and read
every decoding decision from it. Column names come from `pipeline/schema.py`.

The mel preprocessor runs in stage 3 with the encoder, as NeMo runs it: on a GPU it costs a few percent of the
encoder, and it belongs to the checkpoint (its config and window), which only stage 3 loads. Audio fetching,
decoding and resampling, detokenization and CTC beam search run in CPU stages, so GPU actors never wait on them.

Dims: B batch, S samples, T encoder frames, T' frames after blank collapse, V labels with blank.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from pipeline import schema, sink
from pipeline.audio import AudioError, load_audio
from pipeline.bucketing import padded_seconds, plan_batches
from pipeline.calibration import Calibration, load_calibration, measure_of
from pipeline.config import InputConfig, ModelConfig, ResourcesConfig
from pipeline.decoding import DecodingPlan, compact_ctc_log_probs, load_language_model
from pipeline.fetch import fetch_file, file_sha256
from pipeline.manifest import read_manifest
from pipeline.nemo_file import LayoutUnavailable, ModelLayout, read_model_layout
from pipeline.nemo_model import AsrModel, load_asr_model
from pipeline.recognize import pad_waveforms, transcript_of
from pipeline.redact import redact
from pipeline.schema import (
    AUDIO_S,
    COMMITTED_AT,
    CTC_FRAMES,
    CTC_LOG_PROBS,
    FINISH_S,
    PADDED_S,
    PART,
    ROWS,
    ROWS_ERROR,
    ROWS_OK,
    SAMPLES,
    SCORE,
    TOKEN_CONFIDENCE,
    TOKEN_DURATIONS,
    TOKEN_FRAMES,
    TOKENS,
)

ModelLoader = Callable[[ModelConfig, str], AsrModel]


def load_model(model: ModelConfig, device: str) -> AsrModel:
    return load_asr_model(model.uri, sha256=model.sha256, cache_dir=f"{model.cache_dir}/models", device=device)


def load_layout(model: ModelConfig, device: str = "cpu") -> AsrModel | ModelLayout:
    """The model's tokenizer, frame timing and head layout, read from the `.nemo` file without NeMo; the whole
    model only where the file holds something `read_model_layout` does not read (another tokenizer type)."""
    path = fetch_file(model.uri, sha256=model.sha256, cache_dir=f"{model.cache_dir}/models")
    try:
        return read_model_layout(path)
    except LayoutUnavailable:
        return load_model(model, device)


def model_sha256(model: ModelConfig) -> str:
    """The sha256 of the model's file: the pinned one, else hashed from the (cached) file."""
    if model.sha256:
        return model.sha256.lower()
    return file_sha256(fetch_file(model.uri, cache_dir=f"{model.cache_dir}/models"))


def load_checked_calibration(model: ModelConfig, plan: DecodingPlan) -> Calibration | None:
    """The plan's confidence calibration map (None where it has none), refused (`CalibrationMismatch`) if it was
    fitted for another model file or another measure."""
    uri = plan.config.confidence_calibration
    if not uri:
        return None
    calibration = load_calibration(uri)
    calibration.check(model_sha256(model), measure_of(plan))
    return calibration


class ModelLoadError(RuntimeError):
    """The stage's model could not be loaded: no row can be decoded, so the job stops and says why."""


class _BackgroundLoad:
    """Loads a model in a thread started at once; `get()` waits for it and raises `ModelLoadError` naming
    `name` and the cause if loading failed.

    Stages start loading in `__init__`, so the actors of every stage load their models at the same time as
    the first audio is fetched, instead of one after the other as the first batch reaches each (which made a
    short job wait for two model loads in a row); and `__init__` itself returns at once.
    """

    def __init__(self, load: Callable[[], AsrModel], name: str) -> None:
        self.name = name
        self._result: AsrModel | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(load,), name="load-model", daemon=True)
        self._thread.start()

    def _run(self, load: Callable[[], AsrModel]) -> None:
        try:
            self._result = load()
        except BaseException as error:  # re-raised in the stage's thread by get()
            self._error = error

    def get(self) -> AsrModel:
        self._thread.join()
        if self._error is not None:
            raise ModelLoadError(redact(f"cannot load the model {self.name}: {type(self._error).__name__}: "
                                        f"{self._error}")) from self._error
        assert self._result is not None
        return self._result


def _fail(table: pa.Table, failed: dict[int, str]) -> pa.Table:
    """Mark rows (index -> message naming the manifest and line) as errors."""
    if not failed:
        return table
    status = table.column(schema.STATUS).to_pylist()
    error = table.column(schema.ERROR).to_pylist()
    manifests, lines = table.column(schema.MANIFEST).to_pylist(), table.column(schema.LINE).to_pylist()
    for index, message in failed.items():
        status[index] = schema.STATUS_ERROR
        error[index] = f"{manifests[index]}, line {lines[index]}: {message}"
    table = table.set_column(table.schema.get_field_index(schema.STATUS), schema.STATUS, pa.array(status, pa.string()))
    return table.set_column(table.schema.get_field_index(schema.ERROR), schema.ERROR, pa.array(error, pa.string()))


def _set(table: pa.Table, name: str, values: pa.Array | list) -> pa.Table:
    values = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
    index = table.schema.get_field_index(name)
    return table.set_column(index, name, values) if index >= 0 else table.append_column(name, values)


def _ok_rows(table: pa.Table) -> list[int]:
    return [i for i, s in enumerate(table.column(schema.STATUS).to_pylist()) if s == schema.STATUS_OK]


class ReadManifests:
    """CPU stage: manifest URIs -> their rows (error rows included) not yet committed, as tables of `chunk_rows`.

    Called as a function (Ray tasks), with the committed ids read once by the driver. The rows leave in small
    tables, but Ray Data merges what a task yields into large blocks; `graph.read_rows` splits them again.
    """

    def __init__(self, committed: set[str] | frozenset[str], chunk_rows: int = 16) -> None:
        self.committed = committed
        self.chunk_rows = chunk_rows

    def __call__(self, batch: pa.Table) -> Iterator[pa.Table]:
        for uri in batch.column(schema.MANIFEST).to_pylist():
            rows: list[dict[str, Any]] = []
            for entry in read_manifest(uri):
                if entry[schema.UTTERANCE_ID] not in self.committed:
                    rows.append(entry)
                if len(rows) == self.chunk_rows:
                    yield pa.Table.from_pylist(rows, schema=schema.INPUT_SCHEMA)
                    rows = []
            if rows:
                yield pa.Table.from_pylist(rows, schema=schema.INPUT_SCHEMA)


class LoadAudio:
    """CPU stage: rows -> rows with `samples` (float32 at `sample_rate`), `audio_s` and the measured
    `audio_duration`; a row whose audio cannot be used, or is past a bound of `limits`, becomes an error row."""

    def __init__(self, sample_rate: int, limits: InputConfig | None = None) -> None:
        self.sample_rate, self.limits = sample_rate, limits or InputConfig()

    def __call__(self, table: pa.Table) -> pa.Table:
        table = table.cast(schema.INPUT_SCHEMA) if table.schema != schema.INPUT_SCHEMA else table
        samples: list[np.ndarray] = [np.zeros(0, np.float32)] * table.num_rows
        measured: list[float | None] = [None] * table.num_rows
        failed: dict[int, str] = {}
        uris = table.column(schema.AUDIO_FILEPATH).to_pylist()
        offsets, durations = table.column(schema.OFFSET).to_pylist(), table.column(schema.DURATION).to_pylist()
        channels = table.column(schema.CHANNEL).to_pylist()
        for index in _ok_rows(table):
            try:
                audio = load_audio(uris[index], self.sample_rate, offsets[index], durations[index] or None,
                                   channel=channels[index], limits=self.limits)
                samples[index], measured[index] = audio.samples, audio.duration_s
            except AudioError as error:
                failed[index] = str(error)
            except Exception as error:  # a decoder bug must not cost the batch
                failed[index] = f"{uris[index]}: cannot load audio ({type(error).__name__}: {error})"
        table = _fail(table, failed)
        for index in failed:
            samples[index], measured[index] = np.zeros(0, np.float32), None
        table = _set(table, schema.AUDIO_DURATION, pa.array(measured, pa.float64()))
        table = _set(table, AUDIO_S, pa.array([len(s) / self.sample_rate for s in samples], pa.float64()))
        return _set(table, SAMPLES, pa.array(samples, type=pa.large_list(pa.float32())))


def _samples(column: pa.ChunkedArray, index: int) -> np.ndarray:
    return column[index].values.to_numpy(zero_copy_only=False)  # a view: pad_waveforms copies it once


class TranscribeBatch:
    """GPU stage: a window of rows -> length buckets -> encoder + decoding -> tokens with frames per row.

    Rows already in error pass through. A bucket that fails is retried row by row, so one bad row becomes one
    error row. Where the plan has the writer search, the rows carry compact CTC log-probs for `FinishAndWrite`
    instead of tokens.
    """

    def __init__(self, model: ModelConfig, plan: DecodingPlan, resources: ResourcesConfig,
                 load: ModelLoader = load_model) -> None:
        if plan.device == "cpu" and resources.torch_threads is not None:
            torch.set_num_threads(resources.torch_threads)
        self.model_config, self.plan, self.resources = model, plan, resources
        self.model: AsrModel | None = None
        self.decode = None
        self._loading = _BackgroundLoad(lambda: load(model, plan.device), model.uri)

    def _ensure_loaded(self) -> None:
        if self.model is not None:
            return
        self.model = self._loading.get()
        if not self.plan.writer_searches:
            lm = load_language_model(self.plan, self.plan.lm_vocab_size(self.model), self.model_config.cache_dir)
            self.decode = self.plan.build_decoder(self.model, lm)

    def __call__(self, table: pa.Table) -> pa.Table:
        rows = _ok_rows(table)
        audio_s = np.asarray(table.column(AUDIO_S).to_numpy(zero_copy_only=False), dtype=np.float64)
        results: dict[int, dict[str, Any]] = {}
        failed: dict[int, str] = {}
        padded = np.zeros(table.num_rows)
        column = table.column(SAMPLES)
        buckets = []
        if rows:
            self._ensure_loaded()
            buckets = plan_batches(audio_s[rows], self.resources.batch_audio_s, self.resources.max_batch_size)
        for bucket in buckets:
            indices = [rows[i] for i in bucket]
            padded[indices] = padded_seconds(audio_s[indices], [np.arange(len(indices))]) / len(indices)
            try:
                results.update(zip(indices, self._run([_samples(column, i) for i in indices])))
            except Exception:
                for index in indices:  # find the row that fails; the others still get results
                    try:
                        results[index] = self._run([_samples(column, index)])[0]
                    except Exception as error:
                        failed[index] = f"{table.column(schema.AUDIO_FILEPATH)[index]}: decoding failed " \
                                        f"({type(error).__name__}: {error})"
        table = _fail(table.drop_columns([SAMPLES]), failed)
        table = _set(table, PADDED_S, pa.array(padded, pa.float64()))
        empty: dict[str, Any] = {}
        for name, kind in ((TOKENS, pa.list_(pa.int64())), (TOKEN_FRAMES, pa.list_(pa.int64())),
                           (TOKEN_DURATIONS, pa.list_(pa.int64())), (SCORE, pa.float64()),
                           (TOKEN_CONFIDENCE, pa.list_(pa.float64())),
                           (CTC_LOG_PROBS, pa.large_binary()), (CTC_FRAMES, pa.list_(pa.int32()))):
            table = _set(table, name, pa.array([results.get(i, empty).get(name) for i in range(table.num_rows)],
                                               type=kind))
        return table

    @torch.no_grad()
    def _run(self, waveforms: list[np.ndarray]) -> list[dict[str, Any]]:
        audio, lengths = pad_waveforms(waveforms)
        encoder_output, encoder_lengths = self.model.encode(audio, lengths)
        if self.plan.writer_searches:
            compact = compact_ctc_log_probs(self.model, encoder_output, encoder_lengths, self.plan)
            return [{CTC_LOG_PROBS: values.tobytes(), CTC_FRAMES: frames} for values, frames in compact]
        return [{TOKENS: h.tokens, TOKEN_FRAMES: h.frame_indices, TOKEN_DURATIONS: h.durations, SCORE: h.score,
                 TOKEN_CONFIDENCE: h.confidence} for h in self.decode(encoder_output, encoder_lengths).to_list()]


class FinishAndWrite:
    """CPU stage: decoded rows -> text and word timestamps (CTC beam search first, for `ctc_beam`) -> one
    committed Parquet part -> a one-row summary of it.

    Reads the model's tokenizer, frame timing and head layout from its `.nemo` file (`load_layout`): no NeMo
    import and no weights in this actor.
    """

    def __init__(self, model: ModelConfig, plan: DecodingPlan, output: str, model_id: str,
                 load: Callable[[ModelConfig, str], AsrModel | ModelLayout] = load_layout) -> None:
        self.model_config, self.plan = model, plan
        self.output = output
        self.model_id = model_id
        self.model: AsrModel | ModelLayout | None = None
        self.search = None
        self.calibration: Calibration | None = None
        self._loading = _BackgroundLoad(lambda: load(model, "cpu"), model.uri)

    def _ensure_loaded(self) -> None:
        if self.model is not None:
            return
        self.calibration = load_checked_calibration(self.model_config, self.plan)  # a wrong map stops the job
        self.model = self._loading.get()
        if self.plan.writer_searches:
            lm = load_language_model(self.plan, self.plan.lm_vocab_size(self.model), self.model_config.cache_dir)
            self.search = self.plan.build_writer_search(self.model, lm)

    def __call__(self, table: pa.Table) -> pa.Table:
        started = time.perf_counter()
        rows = _ok_rows(table)
        failed: dict[int, str] = {}
        hypotheses: dict[int, tuple] = {}
        if rows:
            self._ensure_loaded()
        if self.search is not None and rows:
            vocab = self.model.ctc.vocab_size + 1
            compact = [(np.frombuffer(table.column(CTC_LOG_PROBS)[i].as_py(), np.float16).reshape(-1, vocab),
                        np.asarray(table.column(CTC_FRAMES)[i].as_py(), np.int64)) for i in rows]
            for index, h in zip(rows, self.search(compact)):
                hypotheses[index] = (h.tokens, h.frame_indices, h.durations, h.score, None)
        else:
            columns = [table.column(c).to_pylist()
                       for c in (TOKENS, TOKEN_FRAMES, TOKEN_DURATIONS, SCORE, TOKEN_CONFIDENCE)]
            hypotheses = {i: tuple(column[i] for column in columns) for i in rows}
        texts: list[str | None] = [None] * table.num_rows
        words: list[list[dict] | None] = [None] * table.num_rows
        confidence: list[float | None] = [None] * table.num_rows
        aggregation = self.plan.config.confidence_aggregation
        for index, (tokens, frames, durations, score, token_confidence) in hypotheses.items():
            try:
                transcript = transcript_of(self.model, self.plan.span_kind, tokens, frames, durations, score,
                                           token_confidence, aggregation)
            except Exception as error:
                failed[index] = f"cannot detokenize ({type(error).__name__}: {error})"
                continue
            texts[index], confidence[index] = transcript.text, transcript.confidence
            word_confidence = transcript.word_confidence
            if self.calibration is not None and word_confidence is not None:
                word_confidence, confidence[index] = self.calibration.apply_words(word_confidence, aggregation)
            word_confidence = word_confidence or [None] * len(transcript.words)
            words[index] = [{"word": w.text, "start": w.start_s, "end": w.end_s, "confidence": c}
                            for w, c in zip(transcript.words, word_confidence)]
        table = _fail(table, failed)
        for index in failed:
            texts[index], words[index], confidence[index] = None, None, None
        output = sink.to_output_table({
            **{name: table.column(name) for name in schema.INPUT_COLUMNS},
            **{name: [redact(value) if value else value for value in table.column(name).to_pylist()]
               for name in (schema.MANIFEST, schema.AUDIO_FILEPATH, schema.ERROR)},  # no credential is written
            schema.AUDIO_DURATION: table.column(schema.AUDIO_DURATION),
            schema.TEXT: texts,
            schema.WORDS: words,
            schema.CONFIDENCE: confidence,
            schema.MODEL: [self.model_id] * table.num_rows,
            schema.DECODING: [self.plan.description] * table.num_rows,
        })
        part = sink.write_part(self.output, output) if output.num_rows else ""
        statuses = table.column(schema.STATUS).to_pylist()
        ok = sum(s == schema.STATUS_OK for s in statuses)
        audio_s = table.column(AUDIO_S).to_numpy(zero_copy_only=False)
        return pa.table({
            PART: [part],
            ROWS: [table.num_rows],
            ROWS_OK: [ok],
            ROWS_ERROR: [table.num_rows - ok],
            AUDIO_S: [float(np.sum(audio_s))],
            PADDED_S: [float(np.sum(table.column(PADDED_S).to_numpy(zero_copy_only=False)))],
            FINISH_S: [time.perf_counter() - started],
            COMMITTED_AT: [time.time()],
        })


def summarize(parts: list[dict[str, Any]], started_at: float) -> dict[str, Any]:
    """Summary rows of this run's parts, and the Unix time the run started -> the run's figures."""
    wall_s = time.time() - started_at
    audio_s = sum(p[AUDIO_S] for p in parts)
    padded_s = sum(p[PADDED_S] for p in parts)
    first_commit = min((p[COMMITTED_AT] for p in parts), default=None)
    return {
        "rows": sum(p[ROWS] for p in parts),
        "rows_ok": sum(p[ROWS_OK] for p in parts),
        "rows_error": sum(p[ROWS_ERROR] for p in parts),
        "parts": len([p for p in parts if p[PART]]),
        "audio_hours": audio_s / 3600,
        "wall_s": wall_s,
        "rtfx": audio_s / wall_s if wall_s > 0 else None,
        "padding_efficiency": audio_s / padded_s if padded_s > 0 else None,
        # starting Ray's actors and loading models: on a short job most of the wall time
        "first_part_s": first_commit - started_at if first_commit is not None else None,
    }
