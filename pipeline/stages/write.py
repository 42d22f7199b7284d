"""The writer stage (`FinishAndWrite`, stage 4 of `pipeline/stages/__init__.py`): text, word timestamps and
confidence, and one committed Parquet part per batch. It reads the tokenizer from the `.nemo` file, without NeMo."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from pipeline import schema
from pipeline.config import ModelConfig
from pipeline.decoding import (
    Calibration,
    DecodingPlan,
    StagePhrases,
    head_agreement,
    load_fusion_parts,
    phrase_set,
    transcript_of,
)
from pipeline.io import sink
from pipeline.io.redact import redact
from pipeline.metrics import PartMetrics
from pipeline.model import AsrModel, BackgroundLoad, ModelLayout, load_checked_calibration, load_layout
from pipeline.schema import (
    AUDIO_S,
    BUSY_S_BY_STAGE,
    COMMITTED_AT,
    CTC_FRAMES,
    CTC_LOG_PROBS,
    FINISH_S,
    PADDED_S,
    PART,
    ROWS,
    ROWS_ERROR,
    ROWS_OK,
    SCORE,
    SECOND_TOKENS,
    TOKEN_CONFIDENCE,
    TOKEN_DURATIONS,
    TOKEN_FRAMES,
    TOKENS,
)
from pipeline.stages.rows import busy_s_of, lower_priority, mark_failed, ok_rows


class FinishAndWrite:
    """CPU stage: decoded rows -> text and word timestamps (CTC beam search first, for `ctc_beam`) -> one
    committed Parquet part -> a one-row summary of it.

    Reads the model's tokenizer, frame timing and head layout from its `.nemo` file (`load_layout`): no NeMo
    import and no weights in this actor. For `ctc_beam`, rows listing phrases of their own are searched with them
    (`pipeline/decoding/row_phrases.py`). The summary row adds up the seconds each stage spent on the part's rows
    (`schema.BUSY_S_BY_STAGE`), and each committed part is counted in the job's Ray metrics (`pipeline/metrics.py`).
    """

    @staticmethod
    def cpus(plan: DecodingPlan) -> float:
        """CPUs reserved per writer actor: detokenization and writes take a quarter of one. A writer search (CTC
        beam) is real CPU work: a whole CPU per writer on a GPU cluster; on a CPU-only machine the ASR actors share
        the same few cores, and a whole CPU more would leave none for the manifest reader."""
        return 1.0 if plan.writer_searches and plan.device == "cuda" else 0.25

    def __init__(self, model: ModelConfig, plan: DecodingPlan, output: str, model_id: str,
                 load: Callable[[ModelConfig, str], AsrModel | ModelLayout] = load_layout, nice_steps: int = 0) -> None:
        lower_priority(nice_steps)
        self.model_config, self.plan = model, plan
        self.output = output
        self.model_id = model_id
        self.model: AsrModel | ModelLayout | None = None
        self.search = None
        self.calibration: Calibration | None = None
        self.row_phrases = StagePhrases()  # for ctc_beam: rows' own phrase lists, boosted in this stage's search
        self.metrics = PartMetrics(output)
        self._loading = BackgroundLoad(lambda: load(model, "cpu"), model.uri)

    def _ensure_loaded(self) -> None:
        if self.model is not None:
            return
        self.calibration = load_checked_calibration(self.model_config, self.plan)  # a wrong map stops the job
        self.model = self._loading.get()
        if self.plan.writer_searches:
            self.row_phrases.parts = load_fusion_parts(self.plan, self.model, self.model_config.cache_dir)
            self.search = self.plan.build_writer_search(self.model, self.plan.fusion_model(*self.row_phrases.parts))

    def __call__(self, table: pa.Table) -> pa.Table:
        started = time.perf_counter()
        rows = ok_rows(table)
        failed: dict[int, str] = {}
        hypotheses: dict[int, tuple] = {}
        if rows:
            loading = time.perf_counter()
            self._ensure_loaded()
            started += time.perf_counter() - loading  # waiting for the model's layout is not the part's time
        if self.search is not None and rows:
            sets, unusable = self.row_phrases.sets(table, rows, self.plan, self.model)
            failed.update(unusable)
            rows = [index for index in rows if index not in failed]
            vocab = self.model.ctc.vocab_size + 1
            compact = [(np.frombuffer(table.column(CTC_LOG_PROBS)[i].as_py(), np.float16).reshape(-1, vocab),
                        np.asarray(table.column(CTC_FRAMES)[i].as_py(), np.int64)) for i in rows]
            if sets:  # the rows with phrases by a search of this batch's trees, the others by the actor's
                found = self.row_phrases.get(self.plan, self.model).search(self.model, self.search, compact,
                                                                          [sets.get(i) for i in rows])
            else:
                found = self.search(compact) if compact else []
            for index, h in zip(rows, found):
                hypotheses[index] = (h.tokens, h.frame_indices, h.durations, h.score, h.confidence)
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
        second_texts, agreements = self._second_head(table, texts, failed)
        table = mark_failed(table, failed)
        for index in failed:
            texts[index], words[index], confidence[index] = None, None, None
            second_texts[index] = agreements[index] = None
        output = sink.to_output_table({
            **{name: table.column(name) for name in schema.INPUT_COLUMNS},
            **{name: [redact(value) if value else value for value in table.column(name).to_pylist()]
               for name in (schema.MANIFEST, schema.AUDIO_FILEPATH, schema.ERROR)},  # no credential is written
            schema.AUDIO_DURATION: table.column(schema.AUDIO_DURATION),
            schema.FILE_DURATION: (table.column(schema.FILE_DURATION)  # null where no audio stage measured it
                                   if schema.FILE_DURATION in table.column_names else None),
            schema.TEXT: texts,
            schema.WORDS: words,
            schema.CONFIDENCE: confidence,
            schema.SECOND_HEAD_TEXT: second_texts,
            schema.HEAD_AGREEMENT: agreements,
            # a row cut by voice activity: its speech segments and their share (the audio stage's; null otherwise)
            **{name: table.column(name) for name in (schema.SPEECH_SEGMENTS, schema.SPEECH_SHARE)
               if name in table.column_names},
            schema.MODEL: [self.model_id] * table.num_rows,
            schema.DECODING: self._descriptions(table),
        })
        part = sink.write_part(self.output, output) if output.num_rows else ""
        statuses = table.column(schema.STATUS).to_pylist()
        ok = sum(s == schema.STATUS_OK for s in statuses)
        audio_s = table.column(AUDIO_S).to_numpy(zero_copy_only=False)
        summary = pa.table({
            PART: [part],
            ROWS: [table.num_rows],
            ROWS_OK: [ok],
            ROWS_ERROR: [table.num_rows - ok],
            AUDIO_S: [float(np.sum(audio_s))],
            PADDED_S: [float(np.sum(table.column(PADDED_S).to_numpy(zero_copy_only=False)))],
            **{name: [busy_s_of(table, name)] for name in BUSY_S_BY_STAGE.values() if name != FINISH_S},
            FINISH_S: [time.perf_counter() - started],
            COMMITTED_AT: [time.time()],
        })
        self.metrics.count_part(summary.to_pylist()[0])
        return summary

    def _second_head(self, table: pa.Table, texts: list[str | None], failed: dict[int, str]
                     ) -> tuple[list[str | None], list[float | None]]:
        """decoding.head_agreement: each row's text from the other head, and its agreement with `texts`."""
        second_texts: list[str | None] = [None] * table.num_rows
        agreements: list[float | None] = [None] * table.num_rows
        if self.plan.second_head is None or SECOND_TOKENS not in table.column_names:
            return second_texts, agreements
        for index, tokens in enumerate(table.column(SECOND_TOKENS).to_pylist()):
            if tokens is None or texts[index] is None or index in failed:
                continue
            second_texts[index] = self.model.tokenizer.ids_to_text(tokens)
            agreements[index] = head_agreement(texts[index], second_texts[index])
        return second_texts, agreements

    def _descriptions(self, table: pa.Table) -> list[str]:
        """The `decoding` column: the plan's description, and for a row boosted with phrases of its own, how many."""
        descriptions = [self.plan.description] * table.num_rows
        if self.plan.boosts_rows and schema.PHRASES in table.column_names:
            for index, value in enumerate(table.column(schema.PHRASES).to_pylist()):
                phrases = phrase_set(value)
                if phrases:
                    descriptions[index] = self.plan.row_description(len(phrases))
        return descriptions
