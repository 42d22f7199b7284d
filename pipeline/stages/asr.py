"""The ASR stage (`TranscribeBatch`, stage 3 of `pipeline/stages/__init__.py`): the one stage that loads the model."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from decoders.pieces import WORD_START
from pipeline import schema
from pipeline.config import InputConfig, LongAudioConfig, ModelConfig, ResourcesConfig
from pipeline.decoding import (
    DecodingPlan,
    PhraseSet,
    StagePhrases,
    compact_ctc_log_probs,
    load_fusion_parts,
    pad_waveforms,
)
from pipeline.io import AudioError, LoadedAudio, load_audio_batch
from pipeline.model import AsrModel, BackgroundLoad, load_model
from pipeline.model.memory import BatchSizing, batch_sizing, memory_budget_bytes
from pipeline.schema import (
    AUDIO_S,
    CHUNKED_READ,
    CTC_FRAMES,
    CTC_LOG_PROBS,
    DECODING_BUSY_S,
    ENCODER_BUSY_S,
    ENERGIES,
    INLINE_RANGES,
    PADDED_S,
    SAMPLES,
    SCORE,
    SECOND_TOKENS,
    SPEECH_RANGES,
    TOKEN_CONFIDENCE,
    TOKEN_DURATIONS,
    TOKEN_FRAMES,
    TOKENS,
)
from pipeline.stages.bucketing import padded_seconds, plan_batches
from pipeline.stages.chunks import (
    Chunk,
    ChunkTokens,
    frame_energies_db,
    merge_compact_ctc,
    merge_tokens,
    plan_chunks,
    segment_chunks,
)
from pipeline.stages.rows import ENERGY_FRAMES_PER_S, mark_failed, ok_rows, set_column, share_busy_s

ModelLoader = Callable[[ModelConfig, str], AsrModel]
MIN_CHUNK_S = 2.0  # a long recording is cut at the first pause this far into a chunk (pipeline/stages/chunks.py)
CHUNK_READ_THREADS = 4  # chunks of long recordings read at once by an ASR actor, ahead of the encoder
SECOND = "second"  # a decoded piece's (tokens, frames) of the other head (decoding.head_agreement), before merging

log = logging.getLogger(__name__)


def _out_of_memory(error: BaseException) -> bool:
    """Whether `error` is an allocation failure (CUDA's, or the CPU allocator's)."""
    return isinstance(error, torch.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and "can't allocate memory" in str(error))


def _hops_to_frames(energies_db: list[float] | None, frame_shift_s: float) -> np.ndarray | None:
    """Energies of 10 ms hops (dB) -> of encoder frames of `frame_shift_s` (the mean power of their hops)."""
    if not energies_db:
        return None
    hops = max(1, round(frame_shift_s * ENERGY_FRAMES_PER_S))
    power = np.power(10.0, np.asarray(energies_db, dtype=np.float64) / 10)
    power = np.pad(power, (0, -len(power) % hops), constant_values=1e-10)
    return 10 * np.log10(power.reshape(-1, hops).mean(axis=1))


def _pairs(flat: list[int] | None) -> list[tuple[int, int]]:
    """A flattened list of ranges (s0, e0, s1, e1, ...) -> [(s0, e0), ...]."""
    return list(zip(flat[0::2], flat[1::2])) if flat else []


def _samples(column: pa.ChunkedArray, index: int) -> np.ndarray:
    return column[index].values.to_numpy(zero_copy_only=False)  # a view: pad_waveforms copies it once


class TranscribeBatch:
    """GPU stage: a window of rows -> length buckets -> encoder + decoding -> tokens with frames per row.

    A row longer than `long_audio.chunk_s` is cut into chunks (`pipeline/stages/chunks.py`) that join the buckets
    beside short rows, and its chunks' results are merged back into the row, at the recording's frames: a chunk per
    speech segment where the audio stage found them (`speech_ranges`; their samples, only the speech, in `samples`
    with `inline_ranges`, or read again by range past `INLINE_SPEECH_S`), else chunks at pauses or of fixed length.
    Batches are sized for the model and the actor's memory (`pipeline/model/memory.py::BatchSizing`): rows per
    batch at each length, and the longest piece decoded whole; a row longer than that is cut into chunks of that
    length even where `long_audio.chunk_s` is longer or 0, said once. Rows already in error pass through. A bucket
    that fails is retried piece by piece, so one bad row becomes one error row; one that ran out of memory also
    halves the budget of later batches. Where the plan has the writer search, the rows carry compact CTC log-probs
    for `FinishAndWrite` instead of tokens. Rows listing phrases of their own (`phrases`) are decoded with them,
    each chunk with its row's (`pipeline/decoding/row_phrases.py`); a row whose phrases the tokenizer cannot write
    becomes an error row.
    """

    @staticmethod
    def cpus(resources: ResourcesConfig, device: str) -> float:
        """CPUs reserved per ASR actor: `resources.asr_actor_cpus`, else a whole one beside a GPU, and half of one
        where the actor itself is on a CPU (its torch threads use what the machine has)."""
        return resources.asr_actor_cpus or (1.0 if device == "cuda" else 0.5)

    @staticmethod
    def gpus(device: str) -> int:
        """GPUs reserved per ASR actor: one on a GPU cluster."""
        return 1 if device == "cuda" else 0

    def __init__(self, model: ModelConfig, plan: DecodingPlan, resources: ResourcesConfig,
                 long_audio: LongAudioConfig | None = None, limits: InputConfig | None = None,
                 load: ModelLoader = load_model) -> None:
        if plan.device == "cpu" and resources.torch_threads is not None:
            torch.set_num_threads(resources.torch_threads)
        self.model_config, self.plan, self.resources = model, plan, resources
        self.long_audio, self.limits = long_audio or LongAudioConfig(), limits or InputConfig()
        self.model: AsrModel | None = None
        self.decode = None
        self.second_decode = None  # decoding.head_agreement: the other head's greedy decoder
        self.word_start = np.zeros(0, bool)  # by token id: whether the piece starts a word (chunks are joined there)
        self._readers: ThreadPoolExecutor | None = None  # reads chunks of `chunked_read` rows ahead of the encoder
        self.row_phrases = StagePhrases()  # rows' own phrase lists (`phrases`), boosted where the plan says
        self.sizing: BatchSizing | None = None  # set once the model is loaded
        self._said: set[str] = set()  # the sizing's notices, said once per actor
        self.encoder_busy_s = 0.0  # seconds of the current call in padding, features and the encoder (`_run`)
        self._loading = BackgroundLoad(lambda: load(model, plan.device), model.uri)

    def _ensure_loaded(self) -> None:
        if self.model is not None:
            return
        model = self._loading.get()
        if self.long_audio.attention == "local":
            model.use_local_attention(self.long_audio.local_context)
        pieces = model.tokenizer.ids_to_pieces(range(model.tokenizer.vocab_size))
        self.word_start = np.array([piece.startswith(WORD_START) for piece in pieces], dtype=bool)
        if not self.plan.writer_searches:
            self.row_phrases.parts = load_fusion_parts(self.plan, model, self.model_config.cache_dir)
            self.decode = self.plan.build_decoder(model, self.plan.fusion_model(*self.row_phrases.parts))
        if self.plan.second_head is not None:
            self.second_decode = self.plan.second_head.build_decoder(model)
        self.sizing = self._size_batches(model)
        self.model = model

    def _size_batches(self, model: AsrModel) -> BatchSizing:
        """The batch bounds for `model` within this actor's memory budget (measured now: after the model is loaded,
        a GPU's free memory is what batches can have)."""
        resources, device = self.resources, self.plan.device
        budget = memory_budget_bytes(device, resources.asr_memory_gb, resources.asr_actors,
                                     self.cpus(resources, device))
        sizing = batch_sizing(getattr(model, "config", None) or {}, device, self.long_audio.attention,
                              self.long_audio.local_context, budget, resources.batch_audio_s, resources.max_batch_size)
        if sizing.memory is None:
            self._say("no memory model", "loopscribe: no memory model for this model's encoder: batches are bounded "
                                         "by --batch-audio-s and --max-batch-size only")
        elif resources.batch_audio_s is not None:  # the user's batches, bounded by memory where it holds fewer
            typical_s = min(self.long_audio.chunk_s or 30.0, 30.0)
            if sizing.memory.max_rows(typical_s, budget) < min(resources.max_batch_size,
                                                               resources.batch_audio_s // typical_s):
                self._say("batch over budget", f"loopscribe: --batch-audio-s {resources.batch_audio_s:g} is more "
                                               f"than {budget / (1 << 30):.1f} GiB of memory holds for this model; "
                                               "batches are made smaller")
        log.info("loopscribe: %s", sizing.describe())
        return sizing

    def _say(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning(message)

    def _chunk_seconds(self) -> tuple[float, float]:
        """(chunk, overlap) seconds long rows are cut into: `long_audio`'s, or shorter where a piece of that length
        does not fit in memory whole (0: rows are decoded whole)."""
        chunk_s, overlap_s = self.long_audio.chunk_s, self.long_audio.overlap_s
        longest = self.sizing.longest_s if self.sizing is not None else math.inf
        if math.isfinite(longest) and (not chunk_s or longest < chunk_s):
            fitting = max(MIN_CHUNK_S * 2, math.floor(longest))
            self._say("chunked for memory", f"loopscribe: rows longer than {fitting:.0f} s do not fit in "
                                            f"{self.sizing.budget_bytes / (1 << 30):.1f} GiB at once with "
                                            f"{self.long_audio.attention} attention; they are decoded in chunks of "
                                            f"{fitting:.0f} s (--asr-memory-gb sets the budget; --attention local "
                                            "takes less)")
            return fitting, min(overlap_s, fitting / 4)
        return chunk_s, overlap_s

    def _chunks(self, num_samples: int, samples: np.ndarray | None = None, always: bool = False,
                energies_db: np.ndarray | None = None) -> list[Chunk] | None:
        """The chunks of a row of `num_samples` samples, cut at pauses found from its `samples` or its encoder
        frames' `energies_db`; None for a row decoded whole (one chunk if `always`)."""
        samples_per_frame = round(self.model.frame_shift_s * self.model.sample_rate)
        chunk_s, overlap_s = self.long_audio.chunk_s, self.long_audio.overlap_s
        if self.sizing is not None and num_samples > self.sizing.longest_s * self.model.sample_rate:
            chunk_s, overlap_s = self._chunk_seconds()
        chunk_frames = round(chunk_s / self.model.frame_shift_s)
        if not chunk_s or num_samples <= chunk_frames * samples_per_frame:
            frames = -(-num_samples // samples_per_frame)
            return [Chunk(0, num_samples, 0, frames)] if always else None
        energies = frame_energies_db(samples, samples_per_frame) if samples is not None else energies_db
        return plan_chunks(num_samples, samples_per_frame, chunk_frames, round(overlap_s / self.model.frame_shift_s),
                           energies, min_frames=round(MIN_CHUNK_S / self.model.frame_shift_s))

    def __call__(self, table: pa.Table) -> pa.Table:
        rows = ok_rows(table)
        column = table.column(SAMPLES)
        uris = table.column(schema.AUDIO_FILEPATH).to_pylist()
        audio_s = table.column(AUDIO_S).to_pylist()
        chunked_read = (table.column(CHUNKED_READ).to_pylist() if CHUNKED_READ in table.column_names
                        else [False] * table.num_rows)
        failed: dict[int, str] = {}
        padded = np.zeros(table.num_rows)
        pieces: list[tuple[int, Chunk | None]] = []  # (row, chunk) decoded as one waveform; None: the whole row
        if rows:
            self._ensure_loaded()
        started, self.encoder_busy_s = time.perf_counter(), 0.0  # busy seconds: the model's loading left out
        sets: dict[int, PhraseSet] = {}  # rows listing phrases of their own, boosted in the ASR stage's decoders
        if not self.plan.writer_searches:
            sets, unusable = self.row_phrases.sets(table, rows, self.plan, self.model)
            failed.update(unusable)
            rows = [index for index in rows if index not in failed]
        sample_rate = self.model.sample_rate if rows else 1
        speech_ranges = (table.column(SPEECH_RANGES).to_pylist() if SPEECH_RANGES in table.column_names
                         else [None] * table.num_rows)
        held_ranges = (table.column(INLINE_RANGES).to_pylist() if INLINE_RANGES in table.column_names
                       else [None] * table.num_rows)
        inline: dict[int, int] = {}  # piece of a row cut by voice activity -> where its samples start in `samples`
        silent: list[int] = []  # rows cut by voice activity with no speech at all
        for index in rows:
            if speech_ranges[index] is not None:  # cut by voice activity: a chunk per speech segment
                segments = _pairs(speech_ranges[index])
                num_samples = max([round(audio_s[index] * sample_rate)] + [end for _, end in segments])
                chunks = segment_chunks(segments, num_samples, round(self.model.frame_shift_s * sample_rate))
                if not chunks:
                    silent.append(index)
                    continue
                if not chunked_read[index]:
                    held = _pairs(held_ranges[index])
                    starts = np.cumsum([0] + [end - start for start, end in held])
                    places = []  # where each chunk's samples start among those passed on
                    for chunk in chunks:
                        within = [k for k, (start, end) in enumerate(held)
                                  if start <= chunk.start_sample and chunk.end_sample <= end]
                        if not within:
                            failed[index] = (f"{uris[index]}: a speech segment's encoder frames "
                                             f"({chunk.start_sample}-{chunk.end_sample}) reach past the samples the "
                                             "audio stage passed on")
                            break
                        places.append(int(starts[within[0]]) + chunk.start_sample - held[within[0]][0])
                    if index not in failed:
                        inline.update((len(pieces) + k, place) for k, place in enumerate(places))
                        pieces += [(index, chunk) for chunk in chunks]
                    continue
                pieces += [(index, chunk) for chunk in chunks]
                continue
            if chunked_read[index]:
                chunks = self._chunks(round(audio_s[index] * sample_rate), always=True,
                                      energies_db=_hops_to_frames(table.column(ENERGIES)[index].as_py(),
                                                                  self.model.frame_shift_s))
            else:
                chunks = self._chunks(len(column[index].values), _samples(column, index))
            pieces += [(index, None)] if chunks is None else [(index, chunk) for chunk in chunks]
        piece_s = np.array([len(column[index].values) / sample_rate if chunk is None
                            else (chunk.end_sample - chunk.start_sample) / sample_rate for index, chunk in pieces])
        results: list[dict[str, Any] | None] = [None] * len(pieces)
        read_samples: dict[int, int] = {}  # chunked_read rows: samples read, to the end of the furthest chunk

        def in_memory(piece: int) -> np.ndarray:
            index, chunk = pieces[piece]
            samples = _samples(column, index)
            if chunk is None:
                return samples
            start = inline.get(piece, chunk.start_sample)  # a segment's place among the speech passed on
            return samples[start: start + chunk.end_sample - chunk.start_sample]

        sizing = self.sizing
        buckets = plan_batches(piece_s, sizing.batch_audio_s, sizing.max_batch_size, sizing.max_rows) if pieces else []
        buckets = [[int(i) for i in bucket] for bucket in buckets]
        reads = self._read_ahead(table, pieces, buckets[0], chunked_read) if buckets else {}
        for number, bucket in enumerate(buckets):
            waveforms: dict[int, np.ndarray] = {}
            for piece in bucket:
                index = pieces[piece][0]
                if not chunked_read[index]:
                    waveforms[piece] = in_memory(piece)
                    continue
                try:
                    waveforms[piece] = self._chunk_audio(reads.pop(piece), pieces[piece][1])
                except Exception as error:
                    failed.setdefault(index, str(error) if isinstance(error, AudioError) else
                                      f"{uris[index]}: cannot load audio ({type(error).__name__}: {error})")
                    continue
                chunk = pieces[piece][1]
                if speech_ranges[index] is None:  # a row cut by voice activity was measured whole by LoadAudio
                    read_samples[index] = max(read_samples.get(index, 0), chunk.start_sample + len(waveforms[piece]))
            if number + 1 < len(buckets):  # the next bucket's chunks are read while this one is encoded
                reads.update(self._read_ahead(table, pieces, buckets[number + 1], chunked_read))
            bucket = [piece for piece in bucket if pieces[piece][0] not in failed]
            for piece in [piece for piece in bucket if not len(waveforms[piece])]:  # a chunk past the audio's end
                results[piece] = self._nothing()
            bucket = [piece for piece in bucket if len(waveforms[piece])]
            if not bucket:
                continue
            np.add.at(padded, [pieces[i][0] for i in bucket],
                      padded_seconds(piece_s[bucket], [np.arange(len(bucket))]) / len(bucket))
            try:
                for piece, result in zip(bucket, self._run([waveforms[i] for i in bucket],
                                                           [sets.get(pieces[i][0]) for i in bucket])):
                    results[piece] = result
            except Exception as error:
                if _out_of_memory(error) and self.sizing is not None:  # the memory model was wrong: later batches
                    self.sizing = self.sizing.halved()                  # get half the budget
                    self._say("out of memory", f"loopscribe: an encoder batch of {len(bucket)} rows ran out of "
                                               f"memory; later batches are sized for "
                                               f"{self.sizing.budget_bytes / (1 << 30):.1f} GiB")
                    if self.plan.device == "cuda":
                        torch.cuda.empty_cache()
                for piece in bucket:  # find the piece that fails; the others still get results
                    index = pieces[piece][0]
                    try:
                        results[piece] = self._run([waveforms[piece]], [sets.get(index)])[0]
                    except Exception as error:
                        failed.setdefault(index, f"{uris[index]}: decoding failed ({type(error).__name__}: {error})")
        by_row: dict[int, list[tuple[Chunk | None, dict[str, Any]]]] = {}
        for (index, chunk), result in zip(pieces, results):
            by_row.setdefault(index, []).append((chunk, result))
        merged = {index: self._merge(row_pieces) for index, row_pieces in by_row.items() if index not in failed}
        for index in silent:  # nothing decoded: no tokens
            merged[index] = self._merge([(Chunk(0, 0, 0, 0), self._nothing())])
        table = mark_failed(table.drop_columns([name for name in (SAMPLES, SPEECH_RANGES, INLINE_RANGES)
                                                if name in table.column_names]), failed)
        if read_samples:  # what was read of the rows read in chunks: measured, as LoadAudio measures the others
            measured = table.column(schema.AUDIO_DURATION).to_pylist()
            for index, samples in read_samples.items():
                if index not in failed:
                    measured[index] = audio_s[index] = samples / sample_rate
            table = set_column(table, schema.AUDIO_DURATION, pa.array(measured, pa.float64()))
            table = set_column(table, AUDIO_S, pa.array(audio_s, pa.float64()))
        table = set_column(table, PADDED_S, pa.array(padded, pa.float64()))
        empty: dict[str, Any] = {}
        for name, kind in ((TOKENS, pa.list_(pa.int64())), (TOKEN_FRAMES, pa.list_(pa.int64())),
                           (TOKEN_DURATIONS, pa.list_(pa.int64())), (SCORE, pa.float64()),
                           (TOKEN_CONFIDENCE, pa.list_(pa.float64())),
                           (CTC_LOG_PROBS, pa.large_binary()), (CTC_FRAMES, pa.list_(pa.int32())),
                           (SECOND_TOKENS, pa.list_(pa.int64()))):
            table = set_column(table, name, pa.array([merged.get(i, empty).get(name) for i in range(table.num_rows)],
                                               type=kind))
        table = share_busy_s(table, ENCODER_BUSY_S, self.encoder_busy_s)
        return share_busy_s(table, DECODING_BUSY_S, time.perf_counter() - started - self.encoder_busy_s)

    def _read_ahead(self, table: pa.Table, pieces: list[tuple[int, Chunk | None]], bucket: list[int],
                    chunked_read: list[bool]) -> dict[int, tuple[Future, int]]:
        """Start reading the chunks of `chunked_read` rows in `bucket`: piece -> (the future of its row's chunks'
        audio, its place in them). The chunks of one recording are one `load_audio_batch` call, which reads by
        range what they need, once."""
        by_row: dict[int, list[int]] = {}
        for piece in bucket:
            if chunked_read[pieces[piece][0]]:
                by_row.setdefault(pieces[piece][0], []).append(piece)
        if not by_row:
            return {}
        if self._readers is None:
            self._readers = ThreadPoolExecutor(max_workers=CHUNK_READ_THREADS, thread_name_prefix="read-chunk")
        sample_rate = self.model.sample_rate
        reads: dict[int, tuple[Future, int]] = {}
        for index, row_pieces in by_row.items():
            uri = table.column(schema.AUDIO_FILEPATH)[index].as_py()
            offset = table.column(schema.OFFSET)[index].as_py() or 0.0
            chunks = [pieces[piece][1] for piece in row_pieces]
            future = self._readers.submit(
                load_audio_batch, [uri] * len(chunks), sample_rate,
                [offset + chunk.start_sample / sample_rate for chunk in chunks],
                [(chunk.end_sample - chunk.start_sample) / sample_rate for chunk in chunks],
                [table.column(schema.CHANNEL)[index].as_py()] * len(chunks), self.limits)
            reads.update((piece, (future, place)) for place, piece in enumerate(row_pieces))
        return reads

    def _chunk_audio(self, read: tuple[Future, int], chunk: Chunk) -> np.ndarray:
        """A chunk's samples from `_read_ahead`; raises the `AudioError` of a chunk that cannot be read, naming
        where in the recording it is."""
        future, place = read
        audio = future.result()[place]
        if isinstance(audio, LoadedAudio):
            return audio.samples
        if chunk.start_sample > 0 and "past the end" in str(audio):  # the manifest's duration overstates it
            return np.zeros(0, np.float32)
        rate = self.model.sample_rate
        raise AudioError(f"{audio} (reading {chunk.start_sample / rate:.1f} s to {chunk.end_sample / rate:.1f} s of "
                         "the recording)")

    def _nothing(self) -> dict[str, Any]:
        """The result of a chunk with no audio (past the end of what its recording holds)."""
        second = {SECOND: ([], [])} if self.second_decode is not None else {}
        if self.plan.writer_searches:
            return {"compact": (np.zeros((0, self.model.ctc.vocab_size + 1), np.float16), np.zeros(0, np.int32)),
                    **second}
        return {TOKENS: [], TOKEN_FRAMES: [], TOKEN_DURATIONS: [] if self.plan.span_kind == "tdt" else None,
                SCORE: 0.0, TOKEN_CONFIDENCE: [] if self.plan.config.confidence else None, **second}

    def _merge(self, pieces: list[tuple[Chunk | None, dict[str, Any]]]) -> dict[str, Any]:
        """One row's decoded pieces -> its result columns (a whole row's as they are; chunks merged)."""
        chunks = [chunk for chunk, _ in pieces]
        second = {}
        if self.second_decode is not None:  # the other head's tokens, merged as the chosen head's are
            if chunks == [None]:
                second = {SECOND_TOKENS: pieces[0][1][SECOND][0]}
            else:
                second = {SECOND_TOKENS: merge_tokens(chunks, [ChunkTokens(r[SECOND][0], r[SECOND][1], None, None, 0.0)
                                                               for _, r in pieces], self.word_start).tokens}
        if self.plan.writer_searches:
            if chunks == [None]:
                values, frames = pieces[0][1]["compact"]
            else:
                values, frames = merge_compact_ctc(chunks, [result["compact"] for _, result in pieces])
            return {CTC_LOG_PROBS: values.tobytes(), CTC_FRAMES: frames, **second}
        if chunks == [None]:
            return {**pieces[0][1], **second}
        hypothesis = merge_tokens(chunks, [ChunkTokens(r[TOKENS], r[TOKEN_FRAMES], r[TOKEN_DURATIONS],
                                                       r[TOKEN_CONFIDENCE], r[SCORE]) for _, r in pieces],
                                  self.word_start)
        return {TOKENS: hypothesis.tokens, TOKEN_FRAMES: hypothesis.frame_indices,
                TOKEN_DURATIONS: hypothesis.durations, SCORE: hypothesis.score,
                TOKEN_CONFIDENCE: hypothesis.confidence, **second}

    @torch.no_grad()
    def _run(self, waveforms: list[np.ndarray], sets: list[PhraseSet | None]) -> list[dict[str, Any]]:
        """Waveforms, each with its row's phrase set (None: none; a chunk has its row's) -> their results."""
        encoding = time.perf_counter()
        audio, lengths = pad_waveforms(waveforms)
        encoder_output, encoder_lengths = self.model.encode(audio, lengths)
        if encoder_output.is_cuda:  # the encoder's kernels finished, so that its time is not counted as decoding's
            torch.cuda.synchronize(encoder_output.device)
        self.encoder_busy_s += time.perf_counter() - encoding
        seconds = [{}] * len(waveforms)
        if self.second_decode is not None:  # the other head, greedy, on the same encoder output
            seconds = [{SECOND: (h.tokens, h.frame_indices)}
                       for h in self.second_decode(encoder_output, encoder_lengths).to_list()]
        if self.plan.writer_searches:
            return [{"compact": compact, **second} for compact, second in zip(
                compact_ctc_log_probs(self.model, encoder_output, encoder_lengths, self.plan), seconds)]
        if any(sets):  # the rows with phrases by a decoder of this batch's trees, the others by the actor's
            hypotheses = self.row_phrases.get(self.plan, self.model).decode(
                self.model, self.decode, encoder_output, encoder_lengths, sets)
        else:
            hypotheses = self.decode(encoder_output, encoder_lengths).to_list()
        return [{TOKENS: h.tokens, TOKEN_FRAMES: h.frame_indices, TOKEN_DURATIONS: h.durations, SCORE: h.score,
                 TOKEN_CONFIDENCE: h.confidence, **second} for h, second in zip(hypotheses, seconds)]
