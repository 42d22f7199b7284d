"""Per-utterance phrase lists: a row's own phrases (a manifest's `phrases`, carried in the `phrases` column) boosted
for that row alone, batched: one automaton per batch holds the trees of every phrase set its rows list
(`decoders.boosting.rows.RowPhraseBoosting`), each row walking its own.

What a row gets. The plan decides once (`DecodingPlan.row_boost_weight`: `--boost-weight`, default 0.5; 0 switches
rows' lists off):
- a row that lists phrases: the boosting tree of its phrases, plus the job's `--phrases` tree where there is one,
  summed (each list rewarded as it would be alone, as NeMo adds a per-stream biasing model to its global fusion
  models), at `boost_weight`, plus the n-gram LM where the job has one, as the plan fuses them
  (`DecodingPlan.fusion_model`). Its result is exactly that of decoding the row alone with
  `WeightedSum(job tree, 1, PhraseBoosting(its phrases), 1)` (or `PhraseBoosting(its phrases)` without a job list);
- a row that lists none: the actor's own decoder, exactly as in a job without per-utterance lists.
So a batch mixing both is decoded in two calls of one encoder output (its rows with phrases, then the others); a
batch whose rows list none in one call, as before. The two calls keep rows without phrases exact: a decoder's
fusion weight changes more than the fused scores (the transducer beam searches' weighted blank scoring reads it),
so a row cannot ride along in a boosted call with zero rewards and decode as it would unboosted.

Cost, paid in the actor that decodes (the ASR actor; the writer for `ctc_beam`), per batch with phrases:
tokenizing the phrases not seen before (cached per distinct phrase), building the tree of each phrase set not
seen before (cached per distinct set: rows sharing a list, and lists recurring in later batches, build once),
concatenating the batch's trees (`union_tensors`) and building the batch's decoder (without CUDA graphs: a capture
would serve one call). Figures in docs/decoding.md.

Dims: B batch, T frames, D encoder features.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from pipeline import schema
from pipeline.decoding.fusion import PhraseTokenizer, sentencepiece_of
from pipeline.decoding.plan import Decode, DecodingPlan, WriterSearch

if TYPE_CHECKING:
    import pyarrow as pa
    from torch import Tensor

    from decoders.boosting import PhraseBoosting
    from decoders.hypotheses import Hypothesis
    from decoders.protocols import LanguageModel
    from pipeline.decoding.plan import CompactCtc
    from pipeline.model import AsrModel, ModelLayout

PhraseSet = tuple[tuple[str, "float | None"], ...]  # a row's phrases: (text, weight or None), sorted, each once
MAX_CACHED_PHRASES = 20_000  # tokenized phrases an actor keeps (about 2 KiB each: 35 MiB)
MAX_CACHED_SETS = 1_000  # phrase sets' trees an actor keeps (a few KiB each, plus 16 bytes a label for the root)


def phrase_set(value: Any) -> PhraseSet | None:
    """A row's `phrases` column value ([{text, weight}] or None) -> its phrase set; None for no phrases. The order
    and repeats of a list do not change its tree, so they do not make another set."""
    if not value:
        return None
    items = {(item["text"], None if item["weight"] is None else float(item["weight"])) for item in value}
    return tuple(sorted(items, key=lambda item: (item[0], item[1] is not None, item[1] or 0.0)))


def phrase_sets(values: Sequence[Any], rows: Sequence[int]) -> dict[int, PhraseSet]:
    """The `phrases` column's values -> {row: its phrase set} for those of `rows` that list phrases."""
    sets = {index: phrase_set(values[index]) for index in rows}
    return {index: value for index, value in sets.items() if value is not None}


class RowPhrases:
    """An actor's per-utterance phrase boosting (module docstring): checks rows' phrases against the tokenizer, and
    decodes (or searches) a batch whose rows list phrases, with the actor's plain decoder for the rows that do not.

    `lm` and `job_boosting`: the plan's n-gram LM and the job's `--phrases` tree (`load_fusion_parts`), moved here,
    once, to where the decoders run, so that a batch's decoder moves only the batch's trees there.
    """

    def __init__(self, plan: DecodingPlan, model: AsrModel | ModelLayout, lm: LanguageModel | None = None,
                 job_boosting: PhraseBoosting | None = None) -> None:
        if not plan.boosts_rows:
            raise ValueError("the plan boosts no per-utterance phrases (decoding.boost_weight is 0)")
        # where the decoders run (the writer's search: its CPU), with its index: a batch's decoder then finds the LM
        # there and moves only the batch's trees
        device = _exact_device("cpu" if plan.writer_searches else plan.device)
        self.plan = dataclasses.replace(plan.with_row_phrases(), device=str(device))
        self.vocab_size = plan.lm_vocab_size(model)
        self.tokenize = PhraseTokenizer(sentencepiece_of(model))
        if self.tokenize.vocab_size != self.vocab_size:
            raise ValueError(f"the tokenizer has {self.tokenize.vocab_size} pieces but the head {self.vocab_size} "
                             "labels")
        self.lm = lm.to(device) if lm is not None else None
        self.job_boosting = job_boosting.to(device) if job_boosting is not None else None
        self._spellings: OrderedDict[str, list[list[int]] | str] = OrderedDict()  # spellings, or why none
        self._trees: OrderedDict[PhraseSet, PhraseBoosting] = OrderedDict()
        self.build_s = 0.0  # seconds spent building batches' models (tokenizing, trees, union), for measurements
        self.batches = 0

    # --- checking and building ---------------------------------------------------------------------------
    def problem(self, phrases: PhraseSet) -> str | None:
        """Why a row's phrases cannot be boosted (a phrase the tokenizer cannot write), or None."""
        for text, _ in phrases:
            spellings = self._spell(text)
            if isinstance(spellings, str):
                return spellings
        return None

    def _spell(self, text: str) -> list[list[int]] | str:
        from decoders.boosting import PhraseListError

        cached = self._spellings.get(text)
        if cached is not None:
            self._spellings.move_to_end(text)
            return cached
        try:
            spellings: list[list[int]] | str = self.tokenize(text, "'phrases'")
        except PhraseListError as error:
            spellings = str(error)
        self._spellings[text] = spellings
        if len(self._spellings) > MAX_CACHED_PHRASES:
            self._spellings.popitem(last=False)
        return spellings

    def _tree(self, phrases: PhraseSet) -> PhraseBoosting:
        from decoders.boosting import PhraseBoosting

        tree = self._trees.get(phrases)
        if tree is not None:
            self._trees.move_to_end(phrases)
            return tree
        sequences, weights = [], []
        for text, weight in phrases:
            spellings = self._spell(text)
            if isinstance(spellings, str):
                raise ValueError(spellings)  # `problem` keeps such rows out
            sequences += spellings
            weights += [weight] * len(spellings)
        tree = PhraseBoosting.from_token_sequences(sequences, self.vocab_size, weights, num_phrases=len(phrases))
        self._trees[phrases] = tree
        if len(self._trees) > MAX_CACHED_SETS:
            self._trees.popitem(last=False)
        return tree

    def fused_model(self, sets: Sequence[PhraseSet]) -> LanguageModel:
        """What the decoder of rows with these phrase sets (one per row, in order) fuses: their trees as one model
        bound to the rows, plus the job's tree and the LM as the plan fuses them (module docstring)."""
        from decoders.boosting import RowPhraseBoosting, WeightedSum

        started = time.perf_counter()
        distinct = list(dict.fromkeys(sets))
        number = {phrases: index for index, phrases in enumerate(distinct)}
        rows = RowPhraseBoosting.from_sets([self._tree(phrases) for phrases in distinct],
                                           [number[phrases] for phrases in sets], self.vocab_size)
        boosting = rows if self.job_boosting is None else WeightedSum(self.job_boosting, 1.0, rows, 1.0)
        fused = self.plan.fusion_model(self.lm, boosting)
        self.build_s += time.perf_counter() - started
        self.batches += 1
        return fused

    # --- decoding ------------------------------------------------------------------------------------------
    def decode(self, model: AsrModel, plain: Decode, encoder_output: Tensor, encoder_lengths: Tensor,
               sets: Sequence[PhraseSet | None]) -> list[Hypothesis]:
        """encoder_output [B, T, D], encoder_lengths [B], each row's phrase set (None: none) -> the hypothesis of
        each row: rows with phrases by the batch's decoder, the others by `plain` (the actor's)."""

        def boosted(rows: list[int]) -> Decode:
            return self.plan.build_decoder(model, self.fused_model([sets[i] for i in rows]))

        return _split(sets, lambda rows, decode: _rows_of(decode, encoder_output, encoder_lengths, rows, len(sets)),
                      plain, boosted)

    def search(self, model: AsrModel | ModelLayout, plain: WriterSearch, compact: Sequence[CompactCtc],
               sets: Sequence[PhraseSet | None]) -> list[Hypothesis]:
        """The writer's search (`ctc_beam`) of compact CTC log-probs, each row with its phrase set (None: none):
        rows with phrases by the batch's search, the others by `plain` (the actor's)."""

        def boosted(rows: list[int]) -> WriterSearch:
            return self.plan.build_writer_search(model, self.fused_model([sets[i] for i in rows]), warm_up=False)

        return _split(sets, lambda rows, search: search([compact[i] for i in rows]), plain, boosted)


def check_phrases(values: Sequence[Any], rows: Sequence[int], boosting: Callable[[], RowPhrases | str]
                  ) -> tuple[dict[int, PhraseSet], dict[int, str]]:
    """The `phrases` column's values and the rows to decode -> ({row: its phrase set} for the rows listing
    phrases, {row: why not} for those whose phrases cannot be boosted). `boosting()` is the actor's `RowPhrases`
    (made on first use), or why there is none (a model without a SentencePiece tokenizer)."""
    sets = phrase_sets(values, rows)
    if not sets:
        return {}, {}
    made = boosting()
    problems = {}
    for index, phrases in sets.items():
        problem = made if isinstance(made, str) else made.problem(phrases)
        if problem:
            problems[index] = problem
    return {index: phrases for index, phrases in sets.items() if index not in problems}, problems


def _exact_device(name: str) -> torch.device:
    """`name` with the CUDA device's index (models compare devices exactly when asked to move)."""
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _split(sets: Sequence[PhraseSet | None], run: Callable[[list[int], Any], list[Hypothesis]], plain: Any,
           boosted: Callable[[list[int]], Any]) -> list[Hypothesis]:
    """Run `plain` on the rows without phrases and `boosted(rows)` on the others; results in row order."""
    results: list[Hypothesis | None] = [None] * len(sets)
    with_phrases = [i for i, phrases in enumerate(sets) if phrases]
    without = [i for i, phrases in enumerate(sets) if not phrases]
    for rows, decoder in ((without, plain), (with_phrases, boosted(with_phrases) if with_phrases else None)):
        if rows:
            for index, hypothesis in zip(rows, run(rows, decoder)):
                results[index] = hypothesis
    return results


def _rows_of(decode: Decode, encoder_output: Tensor, encoder_lengths: Tensor, rows: list[int],
             batch_size: int) -> list[Hypothesis]:
    if len(rows) == batch_size:
        return decode(encoder_output, encoder_lengths).to_list()
    index = torch.tensor(rows, dtype=torch.long, device=encoder_output.device)
    return decode(encoder_output.index_select(0, index),
                  encoder_lengths.index_select(0, index.to(encoder_lengths.device))).to_list()


class StagePhrases:
    """A decoding stage's per-utterance phrase boosting (`pipeline/decoding/row_phrases.py`), made with the first batch
    whose rows list phrases: its `RowPhrases`, or why there is none (a model without a SentencePiece tokenizer)."""

    def __init__(self) -> None:
        self.parts: tuple[Any, Any] = (None, None)  # the plan's n-gram LM and job tree (load_fusion_parts)
        self._made: RowPhrases | str | None = None

    def get(self, plan: DecodingPlan, model: AsrModel | ModelLayout) -> RowPhrases | str:
        if self._made is None:
            try:
                self._made = RowPhrases(plan, model, *self.parts)
            except ValueError as error:
                self._made = f"cannot boost the row's 'phrases' ({error})"
        return self._made

    def sets(self, table: pa.Table, rows: list[int], plan: DecodingPlan, model: AsrModel | ModelLayout
             ) -> tuple[dict[int, PhraseSet], dict[int, str]]:
        """({row: its phrase set} for `rows` listing phrases the plan boosts, {row: why they cannot be})."""
        if not (plan.boosts_rows and rows and schema.PHRASES in table.column_names):
            return {}, {}
        return check_phrases(table.column(schema.PHRASES).to_pylist(), rows, lambda: self.get(plan, model))


__all__ = ["MAX_CACHED_PHRASES", "MAX_CACHED_SETS", "PhraseSet", "RowPhrases", "StagePhrases", "check_phrases",
           "phrase_set", "phrase_sets"]
