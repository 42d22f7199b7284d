"""How a job decodes, decided once: the decoding settings, the table of strategies, and the plan.

`DecodingConfig` holds what the user asked for. `STRATEGIES` has one entry per strategy: which head it decodes,
whether it is a beam search, whether it runs TDT models, which stage searches, which settings it reads, and
how its decoder is built. `plan_decoding(facts, config, device)` takes the model's facts
(`pipeline/model/nemo_file.py::ModelFacts`) and the config and returns a frozen `DecodingPlan`: the head, the span
kind of its timestamps, the effective LM weight, the resolved `max_symbols` and device, what the ASR stage hands
on, and the builders of the ASR stage's decoder and of the writer stage's search. Every refusal (a head the
model lacks, TDT where a strategy cannot take it) is written here, once, with the message a user reads.
Everything else (the driver's checks, both stages, the job's advice, benchmarks, in-process decoding) reads the
plan; no other module compares strategy names.

What happens with `--decoding ctc_beam --lm x`: the table's `ctc_beam` row says the CTC head decodes and the
writer stage searches; the plan fuses the LM (weight `lm_weight`) in the writer's `CtcBeamSearch`, and the ASR
stage hands on blank-collapsed CTC log-probs (`compact_ctc_log_probs`, threshold `ctc_collapse_threshold`).

Dims: B batch, T encoder frames, T' frames after blank collapse, D encoder features, V labels with blank.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pipeline.io.redact import redact
from pipeline.model import Head, ModelFacts
from pipeline.settings import check_settings, setting

if TYPE_CHECKING:
    from torch import Tensor

    from decoders.confidence import ConfidenceConfig
    from decoders.hypotheses import BatchedHypotheses, Hypothesis
    from decoders.protocols import LanguageModel
    from pipeline.model import AsrModel, ModelLayout

SpanKind = Literal["rnnt", "tdt", "ctc"]
Decode = Callable[["Tensor", "Tensor"], "BatchedHypotheses"]  # encoder_output [B, T, D], lengths [B]
CompactCtc = tuple[np.ndarray, np.ndarray]  # ([T', V] float16 log-probs, [T'] original frames) of one utterance
WriterSearch = Callable[[Sequence[CompactCtc]], list["Hypothesis"]]


# --- the settings ------------------------------------------------------------------------------------------
CONFIDENCE_GROUP = "confidence (greedy strategies; NeMo's ConfidenceConfig names and defaults)"


def collapse_threshold_flag(value: str) -> float | str:
    """--ctc-collapse-threshold: a number, or 'weak'."""
    if value == "weak":
        return value
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'weak', got {value!r}") from None


@dataclass(frozen=True)
class DecodingConfig:
    """What the user asked for (flags or the YAML `decoding:` section); `plan_decoding` resolves it per model."""

    strategy: str = setting(
        "greedy", lambda: "; ".join(f"{s.name}: {s.help}" for s in STRATEGIES.values()), flag="--decoding",
        metavar="STRATEGY",
        aliases=("--strategy",), choices=lambda: tuple(STRATEGIES))
    beam_size: int = setting(4, "beam width", minimum=1)
    max_symbols: int | None = setting(None, "labels per frame for transducers", minimum=1,
                                      default_help="the checkpoint's setting")
    window_size: int = setting(8, "WIND window in frames (wind_greedy, wind_beam, aes_skip)", minimum=1)
    lm_uri: str | None = setting(
        None, "n-gram LM: a binary from `python jobs/build_lm.py`, or an ARPA file (name containing .arpa), "
              "token-level or word-level (KenLM, SRILM, varikn: converted with the model's tokenizer and cached)",
        flag="--lm", metavar="URI")
    lm_sha256: str | None = setting(None, "expected sha256 of the LM file")
    lm_weight: float = setting(0.0, "shallow-fusion weight of the LM", aliases=("--ngram-lm-alpha",), minimum=0,
                               finite=True)
    # a word-level ARPA is converted to a token LM with the model's tokenizer (pipeline/lm/word_arpa.py) and cached
    lm_level: Literal["auto", "token", "word"] = setting(
        "auto", "an ARPA --lm's units; auto tells them by its unigrams (decoders/ngram/word_lm.py::arpa_level)")
    # phrase boosting (decoders/boosting/tree.py)
    phrases_uri: str | None = setting(
        None, "boost these phrases (names, products) with any strategy, alone or with --lm: one a line, "
              "`phrase<TAB>weight` to give a phrase its own score (default weight 1)", flag="--phrases",
        metavar="FILE_OR_URI")
    # NeMo's boosting_tree_alpha
    boost_weight: float = setting(
        0.5, "fusion weight of the phrase boosting, of --phrases and of the rows' own `phrases` lists (a manifest key; "
             "0 turns those off)", minimum=0, finite=True)
    pruning: Literal["early", "late"] = setting("late", "transducer beam + LM: top-k before or after fusion")
    blank_lm_scoring: Literal["none", "weighted"] = setting("weighted", "transducer beam + LM: blank scoring")
    # None (or 0, the same in YAML and on the command line): off
    ctc_collapse_threshold: float | Literal["weak"] | None = setting(
        0.9, "ctc_beam: blank collapse before the search of frames whose p(blank) exceeds this; 'weak': frames whose "
             "argmax is blank; 0: off", parse=collapse_threshold_flag, checked=False)
    ctc_insertion_bonus: float = setting(0.0, "ctc_beam: score added per label", finite=True)
    ctc_beam_threshold: float = setting(20.0, "ctc_beam: drop candidates this far (log-prob) below the best",
                                        above=0, finite=True)
    use_cuda_graphs: bool = setting(
        True, "run the transducer decoding loops eagerly on a GPU instead of replaying CUDA graphs",
        flag="--no-cuda-graphs")
    # word and utterance confidence (every strategy), with NeMo's ConfidenceConfig names and defaults
    confidence: bool = setting(False, "fill words[].confidence and the utterance's `confidence` column",
                               group=CONFIDENCE_GROUP)
    confidence_method: Literal["max_prob", "entropy"] = setting("entropy", "the measure", group=CONFIDENCE_GROUP)
    entropy_type: Literal["gibbs", "tsallis", "renyi"] = setting("tsallis", "entropy measure", group=CONFIDENCE_GROUP)
    confidence_alpha: float = setting(0.33, "alpha", finite=True, group=CONFIDENCE_GROUP)
    entropy_norm: Literal["exp", "lin"] = setting("exp", "entropy normalisation", group=CONFIDENCE_GROUP)
    confidence_aggregation: Literal["min", "max", "mean", "prod"] = setting(
        "min", "tokens -> words -> utterance", group=CONFIDENCE_GROUP)
    confidence_exclude_blank: bool = setting(
        True, "count the blank steps beside each token (default: excluded)", flag="--confidence-include-blank",
        group=CONFIDENCE_GROUP)
    confidence_calibration: str | None = setting(
        None, "map word confidence to P(word right) with this calibration (a path or URI, fitted for this model and "
              "measure by `python benchmarks/confidence.py --write-calibration`)", metavar="FILE",
        group=CONFIDENCE_GROUP)
    # for filtering pseudo-labels
    head_agreement: bool = setting(
        False, "a hybrid model: also decode the other head greedily; its text in `second_head_text` and the heads' "
               "word agreement (1 - WER between them) in `head_agreement`", group=CONFIDENCE_GROUP)

    def __post_init__(self) -> None:
        check_settings(self, "decoding")
        if self.lm_weight > 0 and not self.lm_uri:
            raise ValueError("decoding.lm_weight > 0 needs decoding.lm_uri (--lm)")
        if self.lm_uri and self.lm_weight == 0:
            raise ValueError("decoding.lm_uri (--lm) needs decoding.lm_weight > 0 (--lm-weight: the LM's fusion "
                             "weight, e.g. 0.3)")
        if self.phrases_uri and not self.boost_weight > 0:
            raise ValueError(f"decoding.phrases_uri (--phrases) needs decoding.boost_weight > 0 (--boost-weight), got "
                             f"{self.boost_weight}")
        threshold = self.ctc_collapse_threshold
        if isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and threshold == 0:
            object.__setattr__(self, "ctc_collapse_threshold", None)  # 0 means off, as on the command line
        elif threshold is not None and threshold != "weak" and not (
                isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and 0.0 < threshold < 1.0):
            raise ValueError(f"decoding.ctc_collapse_threshold must lie in (0, 1), or be 'weak', 0 or None (off): "
                             f"{threshold!r}")
        if self.confidence_calibration and not self.confidence:
            raise ValueError("decoding.confidence_calibration (--confidence-calibration) needs decoding.confidence "
                             "(--confidence)")
        try:
            self.confidence_config()
        except ValueError as error:
            raise ValueError(f"decoding confidence: {error}") from None

    def confidence_config(self) -> ConfidenceConfig | None:
        """The decoders' confidence settings (NeMo's `ConfidenceConfig`); None where confidence is off."""
        from decoders.confidence import ConfidenceConfig, ConfidenceMethodConfig

        if not self.confidence:
            return None
        return ConfidenceConfig(
            exclude_blank=self.confidence_exclude_blank, aggregation=self.confidence_aggregation,
            method_cfg=ConfidenceMethodConfig(name=self.confidence_method, entropy_type=self.entropy_type,
                                              alpha=self.confidence_alpha, entropy_norm=self.entropy_norm))


DECODING_DEFAULTS = {f.name: f.default for f in fields(DecodingConfig)}


# --- the strategies ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Strategy:
    """One row of the table: what a strategy needs and does, and how its decoder is built."""

    name: str
    help: str  # for --help
    head: Head | None  # the head it decodes; None: the model's first (the transducer of a hybrid, else CTC)
    beam: bool = False  # reads beam_size
    windowed: bool = False  # reads window_size (WIND)
    takes_tdt: bool = True  # runs TDT transducers
    writer_searches: bool = False  # the ASR stage hands compact CTC log-probs to the writer stage, which searches
    confidence: bool = False  # its decoder gives per-token confidence (decoders/confidence.py)
    # settings it reads that the `decoding` column names when they differ from the default; fusion_settings only
    # while an LM is fused
    search_settings: tuple[str, ...] = ()
    fusion_settings: tuple[str, ...] = ()


_TRANSDUCER_BEAM_FUSION = ("pruning", "blank_lm_scoring")

STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("greedy", "label-looping greedy of the transducer (CTC greedy for a CTC model)", head=None,
             confidence=True),
    Strategy("wind_greedy", "greedy with WIND's window of --window-size frames (same tokens as greedy)",
             head="transducer", windowed=True, confidence=True),
    Strategy("alsd", "ALSD++ beam search (transducer)", head="transducer", beam=True, confidence=True,
             fusion_settings=_TRANSDUCER_BEAM_FUSION),
    Strategy("aes", "AES++ beam search (transducer)", head="transducer", beam=True, confidence=True,
             fusion_settings=_TRANSDUCER_BEAM_FUSION),
    Strategy("aes_skip", "AES++ that skips blank-only frames with a WIND window; AES++'s results (RNN-T)",
             head="transducer", beam=True, windowed=True, takes_tdt=False, confidence=True,
             fusion_settings=_TRANSDUCER_BEAM_FUSION),
    Strategy("wind_beam", "WIND beam search (Xu et al., 2025): hypotheses filed by frame, windowed joint (RNN-T)",
             head="transducer", beam=True, windowed=True, takes_tdt=False, confidence=True,
             fusion_settings=_TRANSDUCER_BEAM_FUSION),
    Strategy("ctc_greedy", "greedy decoding of the CTC head", head="ctc", confidence=True),
    Strategy("ctc_beam", "blank collapse on the ASR actors, CTC prefix beam search on the writer actors",
             head="ctc", beam=True, writer_searches=True, confidence=True,
             search_settings=("ctc_insertion_bonus", "ctc_beam_threshold")),
)}


GREEDY_BY_HEAD: dict[Head, str] = {"transducer": "greedy", "ctc": "ctc_greedy"}  # each head's plain greedy


class DecodingError(ValueError):
    """A strategy the model cannot run: the message says why and what to use instead."""


def strategies_for(facts: ModelFacts) -> tuple[str, ...]:
    """The strategies a model can run, in table order."""
    return tuple(s.name for s in STRATEGIES.values()
                 if (s.head is None or s.head in facts.heads) and (s.takes_tdt or not facts.is_tdt))


# --- the plan ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecodingPlan:
    """Every decoding decision for one model and config; stages and tools read it and decide nothing."""

    config: DecodingConfig
    strategy: Strategy
    head: Head
    span_kind: SpanKind  # how token frames become time spans (decoders/timestamps.py)
    device: str  # where the ASR stage decodes: "cpu" or "cuda"
    max_symbols: int  # transducers' labels per frame, the checkpoint's unless set
    window_size: int  # 1 unless the strategy is windowed
    lm_weight: float  # the effective fusion weight: 0 when no LM is fused
    use_cuda_graphs: bool  # effective: only where the ASR stage runs on a GPU
    collapse_threshold: float | Literal["weak"] | None  # blank collapse before the writer's search; None: off
    confidence: ConfidenceConfig | None  # per-token confidence from the decoder; None: off
    description: str  # the `decoding` column
    advice: tuple[str, ...]  # settings that are valid but likely to cost accuracy, each with what to do
    boost_weight: float = 0.0  # the effective weight of the job's phrase list: 0 when it has none
    # the weight of a row's own phrase list (the manifest's `phrases`): decoding.boost_weight; 0: lists ignored
    row_boost_weight: float = 0.0
    # with decoding.head_agreement: the plan of the other head's greedy decoding (no LM, no confidence)
    second_head: DecodingPlan | None = None

    @property
    def fuses_lm(self) -> bool:
        return self.lm_weight > 0

    @property
    def boosts(self) -> bool:
        """Whether the job's phrase list (`--phrases`) is boosted."""
        return self.boost_weight > 0

    @property
    def boosts_rows(self) -> bool:
        """Whether rows' own phrase lists (a manifest's `phrases`) are boosted where rows have them."""
        return self.row_boost_weight > 0

    def with_row_phrases(self) -> DecodingPlan:
        """The plan of a batch's rows that list phrases of their own (`pipeline/decoding/row_phrases.py`): boosting at
        `row_boost_weight` (the job's list, if any, and each row's own, summed), so `fusion_weight` and
        `fusion_model` read it; no CUDA graphs, since the boosting model is the batch's own and a capture would serve
        one call."""
        return dataclasses.replace(self, boost_weight=self.row_boost_weight, use_cuda_graphs=False)

    def row_description(self, num_phrases: int) -> str:
        """The `decoding` column of a row boosted with `num_phrases` phrases of its own."""
        weight = "" if self.boosts else f" boost_weight={self.row_boost_weight:g}"
        return f"{self.description} row_phrases={num_phrases}{weight}"

    @property
    def fusion_weight(self) -> float:
        """The weight every decoder multiplies its fused scores by (its `lm_weight`): the sum of the n-gram LM's
        and the boosting weights, as NeMo sums its fusion models' alphas (the transducer beam search's weighted
        blank scoring reads this sum); `fusion_model` divides each model's share by it, so the decoder adds
        exactly `lm_weight * lm + boost_weight * boosting`."""
        return self.lm_weight + self.boost_weight

    def fusion_model(self, lm: LanguageModel | None, boosting: LanguageModel | None) -> LanguageModel | None:
        """What the decoders fuse, at `fusion_weight`: the n-gram LM, the boosting tree, or both as one model
        (`decoders.boosting.tree.WeightedSum`); None when the plan fuses nothing. Each is used only where the plan
        gives it a weight."""
        lm = lm if self.fuses_lm else None
        boosting = boosting if self.boosts else None
        if lm is None or boosting is None:
            return lm if boosting is None else boosting
        from decoders.boosting import WeightedSum

        total = self.fusion_weight
        return WeightedSum(lm, self.lm_weight / total, boosting, self.boost_weight / total)

    @property
    def writer_searches(self) -> bool:
        """Whether the ASR stage hands compact CTC log-probs to the writer stage, which runs the search."""
        return self.strategy.writer_searches

    def lm_vocab_size(self, model: AsrModel | ModelLayout) -> int:
        """The labels (without blank) of the head decoded: what a fused LM must cover."""
        return (model.transducer if self.head == "transducer" else model.ctc).vocab_size

    def build_decoder(self, model: AsrModel, lm: LanguageModel | None = None) -> Decode:
        """The ASR stage's decoder: encoder_output [B, T, D], encoder_lengths [B] -> hypotheses."""
        if self.writer_searches:
            raise ValueError(f"{self.strategy.name} searches in the writer stage: use compact_ctc_log_probs and "
                             "build_writer_search")
        lm = lm if self.fusion_weight > 0 else None
        if self.head == "ctc":
            return _ctc_greedy(model, self, lm)
        if not self.strategy.beam:
            return _label_looping(model, self, lm)
        return _transducer_beam(model, self, lm)

    def build_writer_search(self, model: AsrModel | ModelLayout, lm: LanguageModel | None = None,
                            warm_up: bool = True) -> WriterSearch:
        """The writer stage's search: compact CTC log-probs of utterances (`compact_ctc_log_probs`) -> the best
        hypothesis of each, with tokens at original encoder frames. `warm_up`: compile (or load) the compiled
        search now; a search built per batch (per-utterance phrases, bound to the batch's rows) skips it."""
        if not self.writer_searches:
            raise ValueError(f"{self.strategy.name} decodes in the ASR stage: use build_decoder")
        return _CompactCtcBeamSearch(model, self, lm if self.fusion_weight > 0 else None, warm_up)


def plan_decoding(facts: ModelFacts, config: DecodingConfig, device: str = "cpu",
                  model_name: str = "this model") -> DecodingPlan:
    """The plan for decoding a model with these facts as `config` asks; raises `DecodingError` for a strategy
    the model cannot run."""
    strategy = STRATEGIES[config.strategy]
    head = strategy.head or facts.heads[0]
    if head not in facts.heads:
        others = ", ".join(strategies_for(facts))
        raise DecodingError(f"decoding strategy {strategy.name!r} needs a {_HEAD_NAMES[head]} head; {model_name} "
                            f"({facts.kind}) has none (use {others})")
    if head == "transducer" and facts.is_tdt and not strategy.takes_tdt:
        others = ", ".join(s for s in strategies_for(facts) if (STRATEGIES[s].head or facts.heads[0]) == head)
        raise DecodingError(f"decoding strategy {strategy.name!r} supports RNN-T only; {model_name} is TDT "
                            f"(use {others})")
    if config.confidence and strategy.beam and not config.confidence_exclude_blank:
        raise DecodingError(f"{strategy.name} measures each token's confidence on the step that emits it in the "
                            "chosen hypothesis; --confidence-exclude-blank off (blank frames folded in) is for the "
                            "greedy strategies")
    if config.confidence and not strategy.confidence:
        others = ", ".join(s for s in strategies_for(facts) if STRATEGIES[s].confidence)
        raise DecodingError(f"{strategy.name!r} gives no confidence (use {others}, or leave --confidence off)")
    second_head = None
    if config.head_agreement:
        if len(facts.heads) < 2:
            raise DecodingError(f"head agreement compares a hybrid model's two heads; {model_name} ({facts.kind}) has "
                                "one (leave --head-agreement off)")
        other = "ctc_greedy" if head == "transducer" else "greedy"
        second_head = plan_decoding(facts, DecodingConfig(strategy=other, use_cuda_graphs=config.use_cuda_graphs),
                                    device, model_name)
    return DecodingPlan(
        config=config, strategy=strategy, head=head, second_head=second_head,
        confidence=config.confidence_config(),
        span_kind="ctc" if head == "ctc" else ("tdt" if facts.is_tdt else "rnnt"),
        device=device,
        max_symbols=config.max_symbols or facts.max_symbols,
        window_size=config.window_size if strategy.windowed else 1,
        lm_weight=config.lm_weight if config.lm_uri else 0.0,
        use_cuda_graphs=config.use_cuda_graphs and device == "cuda",
        collapse_threshold=config.ctc_collapse_threshold if strategy.writer_searches else None,
        description=describe(config),
        advice=advice(config),
        boost_weight=config.boost_weight if config.phrases_uri else 0.0,
        row_boost_weight=config.boost_weight,
    )


_HEAD_NAMES = {"ctc": "CTC", "transducer": "transducer"}


def advice(config: DecodingConfig) -> tuple[str, ...]:
    """Settings that are valid but likely to cost accuracy, each with what to do instead (they depend on the
    config alone, so the job prints them before it reads the model)."""
    strategy = STRATEGIES[config.strategy]
    notes = []
    if "ctc_insertion_bonus" in strategy.search_settings and config.lm_weight > 0 and config.ctc_insertion_bonus == 0:
        notes.append(f"{strategy.name} with an LM and no --ctc-insertion-bonus: a token LM's cost per label makes "
                     "the search drop letters and short words; tune the bonus with the weight on a dev set "
                     "(benchmarks/accuracy.py does; docs/benchmarks.md shows the effect)")
    return tuple(notes)


def describe(config: DecodingConfig) -> str:
    """A short identifier of what decoded a row, for the `decoding` column: the strategy and every setting it
    reads that changes its results (beam size, window, limits; others where not the default)."""
    strategy = STRATEGIES[config.strategy]
    parts = [strategy.name]
    if strategy.beam:
        parts.append(f"beam_size={config.beam_size}")
    if strategy.windowed:
        parts.append(f"window_size={config.window_size}")
    if config.max_symbols is not None and strategy.head != "ctc":
        parts.append(f"max_symbols={config.max_symbols}")
    if strategy.writer_searches and config.ctc_collapse_threshold is not None:
        parts.append(f"collapse={config.ctc_collapse_threshold}")
    parts += [f"{name}={getattr(config, name):g}" for name in strategy.search_settings
              if getattr(config, name) != DECODING_DEFAULTS[name]]
    if config.lm_uri and config.lm_weight > 0:
        parts += [f"lm={redact(config.lm_uri)}", f"lm_weight={config.lm_weight:g}"]
        parts += [f"{name}={getattr(config, name)}" for name in strategy.fusion_settings
                  if getattr(config, name) != DECODING_DEFAULTS[name]]
    if config.phrases_uri:
        parts += [f"phrases={redact(config.phrases_uri)}", f"boost_weight={config.boost_weight:g}"]
    if config.head_agreement:
        parts.append("head_agreement")
    if config.confidence:
        measure = (config.confidence_method if config.confidence_method == "max_prob"
                   else f"{config.entropy_type}-{config.entropy_norm}")
        blanks = "" if config.confidence_exclude_blank else "-blanks"
        parts.append(f"confidence={measure}-{config.confidence_alpha:g}-{config.confidence_aggregation}{blanks}")
        if config.confidence_calibration:
            parts.append(f"calibration={redact(config.confidence_calibration).rsplit('/', 1)[-1]}")
    return " ".join(parts)


def results_identity(config: DecodingConfig) -> dict[str, Any]:
    """The settings that make two runs' rows the same kind of result (CUDA graphs change no result)."""
    return dataclasses.asdict(config) | {"use_cuda_graphs": None}


# --- building the decoders ---------------------------------------------------------------------------------
def _label_looping(model: AsrModel, plan: DecodingPlan, lm: LanguageModel | None) -> Decode:
    from decoders.transducer import GreedyConfig, LabelLoopingGreedy

    return LabelLoopingGreedy(model.transducer, GreedyConfig(
        max_symbols=plan.max_symbols, window_size=plan.window_size, lm_weight=plan.fusion_weight if lm else 0.0,
        use_cuda_graphs=plan.use_cuda_graphs), lm, device=plan.device, confidence=plan.confidence)


def _transducer_beam(model: AsrModel, plan: DecodingPlan, lm: LanguageModel | None) -> Decode:
    from decoders.transducer import AesBeamSearch, AesSkipBlankSearch, AlsdBeamSearch, BeamSearchConfig, WindBeamSearch

    config = plan.config
    search = {"alsd": AlsdBeamSearch, "aes": AesBeamSearch, "aes_skip": AesSkipBlankSearch,
              "wind_beam": WindBeamSearch}[plan.strategy.name]
    search = search(model.transducer, BeamSearchConfig(
        beam_size=config.beam_size, max_symbols_per_frame=plan.max_symbols, lm_weight=plan.fusion_weight if lm else 0.0,
        blank_lm_scoring=config.blank_lm_scoring, pruning=config.pruning, window_size=config.window_size,
        use_cuda_graphs=plan.use_cuda_graphs), lm, device=plan.device)
    if plan.confidence is None:
        return search

    def search_with_confidence(encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        from decoders.transducer import hypothesis_confidence

        hypotheses = search(encoder_output, encoder_lengths)
        hypotheses.token_confidence = hypothesis_confidence(model.transducer, encoder_output, hypotheses,
                                                            plan.confidence)
        return hypotheses

    return search_with_confidence


def _ctc_greedy(model: AsrModel, plan: DecodingPlan, lm: LanguageModel | None) -> Decode:
    import torch

    from decoders.ctc import CtcGreedy

    greedy = CtcGreedy(blank_id=model.ctc.blank_id, lm=lm, lm_weight=plan.fusion_weight if lm else 0.0,
                       device=plan.device, confidence=plan.confidence)

    def decode_ctc(encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        with torch.no_grad():
            return greedy(model.ctc.log_probs(encoder_output), encoder_lengths)

    return decode_ctc


def compact_ctc_log_probs(model: AsrModel, encoder_output: Tensor, encoder_lengths: Tensor,
                          plan: DecodingPlan) -> list[CompactCtc]:
    """The ASR stage's half of a writer search: the CTC head's log-probs, blank-collapsed as the plan says, per
    utterance: ([T', V] float16, [T'] original frames). Collapse drops most frames of a trained model, and
    float16 halves the rest."""
    import torch

    from decoders.ctc import collapse_blanks

    with torch.no_grad():
        log_probs = model.ctc.log_probs(encoder_output).float()  # [B, T, V]
        lengths = encoder_lengths.to(log_probs.device)
        threshold = plan.collapse_threshold
        if threshold is not None:  # "weak": frames whose argmax is blank
            log_probs, lengths, frame_map = collapse_blanks(
                log_probs, lengths, model.ctc.blank_id, None if threshold == "weak" else float(threshold))
        else:
            frame_map = torch.arange(log_probs.shape[1], device=log_probs.device).expand(log_probs.shape[0], -1)
        log_probs, lengths, frame_map = log_probs.half().cpu(), lengths.cpu(), frame_map.cpu()
    return [(log_probs[b, : lengths[b]].numpy(), frame_map[b, : lengths[b]].numpy().astype(np.int32))
            for b in range(log_probs.shape[0])]


class _CompactCtcBeamSearch:
    """Compact CTC log-probs of utterances -> the CTC prefix beam search's best hypothesis of each, at original
    frames. The search runs on the writer's CPU: the compiled `CpuCtcBeamSearch` (decoders/ctc/beam_cpu.py: the
    same results, several times faster, utterances in parallel threads) when it can read the fused model, which
    is when there is none or it has the n-gram LM's arrays (`NgramLm`, a phrase-boosting tree, the per-row trees of
    `decoders.boosting.rows`); the torch `CtcBeamSearch` for any other fused model (a sum of two). Its compilation
    (or cache load) is paid here, when the writer actor starts."""

    def __init__(self, model: AsrModel | ModelLayout, plan: DecodingPlan, lm: LanguageModel | None,
                 warm_up: bool = True) -> None:
        from decoders.ctc import CpuCtcBeamSearch, CtcBeamConfig, CtcBeamSearch
        from decoders.ngram import NgramTensors

        config = plan.config
        self.num_labels = model.ctc.vocab_size + 1
        self.confidence = plan.confidence
        compiled = lm is None or isinstance(getattr(lm, "tensors", None), NgramTensors)
        search = CpuCtcBeamSearch if compiled else CtcBeamSearch
        self.search = search(model.ctc.blank_id, CtcBeamConfig(
            beam_size=config.beam_size, lm_weight=plan.fusion_weight if lm is not None else 0.0,
            insertion_bonus=config.ctc_insertion_bonus, beam_threshold=config.ctc_beam_threshold,
            collapse_threshold=None), lm, device="cpu")  # collapsed already, in the ASR stage; searched on a CPU
        if compiled and warm_up:
            self.search.warm_up()

    def __call__(self, compact: Sequence[CompactCtc]) -> list[Hypothesis]:
        import torch

        if not compact:
            return []
        lengths = torch.tensor([len(frames) for _, frames in compact], dtype=torch.long)
        log_probs = torch.zeros(len(compact), max(int(lengths.max()), 1), self.num_labels)
        for b, (values, _) in enumerate(compact):
            log_probs[b, : len(values)] = torch.from_numpy(np.asarray(values, dtype=np.float32))
        found = self.search(log_probs, lengths).to_list()
        confidence: list[list[float] | None] = [None] * len(found)
        if self.confidence is not None:  # each token's emission frame, measured as CTC greedy measures a frame
            from decoders.confidence import token_confidence

            confidence = [token_confidence(log_probs[b, list(h.frame_indices)], self.confidence).tolist()
                          for b, h in enumerate(found)]
        return [dataclasses.replace(hypothesis, frame_indices=[int(frames[f]) for f in hypothesis.frame_indices],
                                    confidence=token_conf)
                for hypothesis, (_, frames), token_conf in zip(found, compact, confidence)]


def decode_in_process(model: AsrModel, plan: DecodingPlan,
                      lm: LanguageModel | None = None) -> Callable[[Tensor, Tensor], list[Hypothesis]]:
    """Any strategy in one process, as the job's stages run it across actors: encoder_output [B, T, D] and
    encoder_lengths [B] -> the best hypothesis of each utterance (tokens at encoder frames; their span kind is
    `plan.span_kind`). For evaluations, benchmarks and tests; the LM is fused only where the plan fuses one."""
    if plan.writer_searches:
        search = plan.build_writer_search(model, lm)
        return lambda encoder_output, encoder_lengths: search(
            compact_ctc_log_probs(model, encoder_output, encoder_lengths, plan))
    decode = plan.build_decoder(model, lm)
    return lambda encoder_output, encoder_lengths: decode(encoder_output, encoder_lengths).to_list()
