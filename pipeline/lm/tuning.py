"""Choosing an LM weight (and CTC beam search's insertion bonus, and a phrase list's boost weight) on a dev set:
encode once, decode many times.

The encoder does not depend on the LM, so a dev set is encoded once (`encode_set`) and each setting tried costs
one decode of the encoder output (`transcribe_set`). The search (`tune`) needs few decodes: a coarse grid of LM
weights, widened upwards while the best sits at its top edge, then the points halfway to the best one's
neighbours; for CTC beam search, the insertion bonus on a grid at the best weight, the weight again at the best
bonus, then steps along the ridge where a larger weight wants a larger bonus (token LMs favour short outputs,
which the bonus pays back) while they improve. Each result is kept in a `TrialCache`, so a rerun decodes only
settings not yet tried. Among LM settings the lowest dev WER wins (ties: the lower CER, then the smaller weight,
then the smaller bonus); it is chosen over decoding without the LM only where it is better beyond chance
(`beats_beyond_chance`: a lower WER, and a one-sided sign test over utterances at p < 0.05), as a tuned weight
finds some setting a word better on any small dev set, even for an LM of unrelated text.

Phrase boosting (`boost_weights`), searched after the LM, coordinate-wise: the boost weights of the grid at the LM
setting chosen above (no LM where there is none, or where it did not win), then, where an LM is used and a boost
weight did better, the LM weight once more a step either side at that boost weight (boosting the names takes over
part of what the LM weight was doing). No boosting (weight 0: the LM setting itself) stays a candidate, and
boosting is chosen over it only by the same rule: a lower WER, beyond chance.

Used by `jobs/lm_bias.py` and `benchmarks/accuracy.py`. Scoring (`score`) is jiwer's WER and CER twice
(`pipeline/reports/scoring.py`): normalised (`wer`, `cer`, and each utterance's word errors: case and punctuation
removed, numbers as words), which every decision above reads, and as written (`written_wer`, `written_cer`), which
the report shows beside it. A cased, punctuated model scored against lower-case references is so tuned on its
words, not on the capitals and commas the references lack.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pipeline.decoding import STRATEGIES, DecodingConfig, decode_in_process, plan_decoding

COARSE_WEIGHTS = (0.25, 0.5, 1.0, 1.5, 2.0)
# boost weights: the picks of benchmarks/boosting.py on the bundled domain set were 0.25-0.75 by strategy, and greedy
# fell apart past 1 (docs/benchmarks.md "Phrase boosting"); 0, no boosting, is the LM setting itself
BOOST_WEIGHTS = (0.25, 0.5, 0.75, 1.0, 1.5)
RECHECK_LM_STEP = 1.25  # where a boost weight beat none: the LM weight tried again, multiplied and divided by this
WIDER_WEIGHTS = (3.0, 4.0)  # tried in turn while the best weight is the largest tried
BONUSES = (0.0, 2.0, 4.0, 6.0)  # CTC beam search's insertion bonus, per label
START_BONUS = 2.0  # the bonus the weight grid is searched with first
RIDGE_STEPS = 3  # CTC beam: rounds of steps from the best (weight x WEIGHT_STEP, bonus + BONUS_STEP) at most
WEIGHT_STEP, BONUS_STEP = 1.2, 2.0
SIGNIFICANCE = 0.05  # an LM is used only where it improves more dev utterances than it worsens, at this level


@dataclass
class EncodedSet:
    """A manifest's reference texts and its encoder output in batches of similar lengths: ([B, T, D], [B] frames,
    the rows of the manifest they hold)."""

    references: list[str]
    batches: list[tuple[Tensor, Tensor, list[int]]]
    audio_s: float


@torch.no_grad()
def encode_set(model, waveforms: Sequence, references: Sequence[str], batch_size: int = 16,
               sample_rate: int = 16000) -> EncodedSet:
    """Waveforms (float32 at the model's rate) -> an `EncodedSet`; longest first, so that batches pad little."""
    from pipeline.decoding import pad_waveforms

    order = sorted(range(len(waveforms)), key=lambda i: len(waveforms[i]), reverse=True)
    batches = []
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        padded, lengths = pad_waveforms([waveforms[i] for i in rows])
        encoder_output, encoder_lengths = model.encode(padded, lengths)
        batches.append((encoder_output, encoder_lengths, rows))
    return EncodedSet(list(references), batches, sum(len(w) for w in waveforms) / sample_rate)


@torch.no_grad()
def transcribe_set(model, decoding: DecodingConfig, lm, encoded: EncodedSet, boosting=None) -> list[str]:
    """The texts that `decoding` (with `lm` and the boosting tree `boosting` where it fuses them) gives for every
    row of `encoded`."""
    plan = plan_decoding(model.facts, decoding)
    decode = decode_in_process(model, plan, plan.fusion_model(lm, boosting))
    texts = [""] * len(encoded.references)
    for output, lengths, rows in encoded.batches:
        for row, hypothesis in zip(rows, decode(output, lengths)):
            texts[row] = model.tokenizer.ids_to_text([int(t) for t in hypothesis.tokens])
    return texts


@dataclass(frozen=True)
class Score:
    wer: float  # normalised (pipeline/reports/scoring.py): what the search decides on
    cer: float  # normalised
    errors: tuple[int, ...]  # normalised word errors (substitutions + deletions + insertions) of each utterance
    written_wer: float | None = None  # the texts as written
    written_cer: float | None = None


def score(references: Sequence[str], hypotheses: Sequence[str]) -> Score:
    """WER and CER of the hypotheses against the references over the whole set, normalised and as written, and
    each utterance's normalised word errors (for the sign test of `beats_beyond_chance`)."""
    from pipeline.reports.scoring import error_rates

    rates = error_rates(references, hypotheses)
    return Score(rates.wer, rates.cer, rates.errors, rates.written_wer, rates.written_cer)


def sign_test_p(better: int, worse: int) -> float:
    """One-sided p-value of `better` utterances improved against `worse` made worse, if improving and worsening
    were equally likely (ties left out)."""
    from math import comb

    n = better + worse
    return sum(comb(n, k) for k in range(better, n + 1)) / 2**n if n else 1.0


def takes_bonus(decoding: DecodingConfig) -> bool:
    return "ctc_insertion_bonus" in STRATEGIES[decoding.strategy].search_settings


@dataclass(frozen=True)
class Trial:
    lm_weight: float  # 0: no LM
    bonus: float | None  # CTC beam search's insertion bonus; None where the strategy has none
    wer: float  # normalised (`score`)
    cer: float
    decode_s: float
    errors: tuple[int, ...] = ()  # normalised word errors of each dev utterance
    boost_weight: float = 0.0  # 0: no phrase boosting (trials stored before boosting was tuned hold none)
    written_wer: float | None = None  # as written (None: a `Score` without it, as the tests' surfaces give)
    written_cer: float | None = None

    @property
    def key(self) -> str:
        return setting_key(self.lm_weight, self.bonus, self.boost_weight)


def setting_key(lm_weight: float, bonus: float | None, boost_weight: float = 0.0) -> str:
    """"LM weight[/bonus][ boost B]": without boosting, the key that trials had before boost weights were tuned,
    which is what they measured."""
    return (f"{lm_weight:g}" + (f"/{bonus:g}" if bonus is not None else "")
            + (f" boost {boost_weight:g}" if boost_weight else ""))


class TrialCache:
    """Trials of one strategy on one dev set and LM, by setting; `save` hands them to `store` (a callable taking
    the JSON text), so a rerun reuses them. `identity` says what they were measured with: trials of another
    identity are not reused, nor trials stored before WER was scored both normalised and as written (their `wer`
    is the written one: `score`)."""

    def __init__(self, identity: dict[str, Any], stored: str | None = None,
                 store: Callable[[str], None] | None = None) -> None:
        self.identity, self.store = identity, store
        self.trials: dict[str, Trial] = {}
        self.reused = 0
        if stored:
            payload = json.loads(stored)
            if payload.get("identity") == json.loads(json.dumps(identity)):
                self.trials = {t["key"]: Trial(**{k: tuple(v) if k == "errors" else v for k, v in t.items()
                                                  if k != "key"}) for t in payload["trials"] if "written_wer" in t}

    def get(self, key: str) -> Trial | None:
        trial = self.trials.get(key)
        self.reused += trial is not None
        return trial

    def add(self, trial: Trial) -> None:
        self.trials[trial.key] = trial
        if self.store is not None:
            self.store(json.dumps({"identity": self.identity, "trials": [
                {"key": key, **dataclasses.asdict(t)} for key, t in self.trials.items()]}, indent=1))


@dataclass
class TuningResult:
    strategy: str
    baseline: Trial  # no LM, no boosting
    best: Trial  # the chosen setting: `unboosted` where no boosting beat it, `baseline` where nothing did
    trials: list[Trial]  # every setting tried, in the order tried
    decodes: int  # decodes run now (trials not taken from the cache)
    reused: int
    # the LM setting chosen without boosting (`baseline` where the LM lost); None: `best`
    unboosted: Trial | None = None

    def __post_init__(self) -> None:
        if self.unboosted is None:
            self.unboosted = self.best

    @property
    def lm_helps(self) -> bool:
        return self.best.lm_weight > 0

    @property
    def boost_helps(self) -> bool:
        return self.best.boost_weight > 0

    def chosen(self, decoding: DecodingConfig, lm_uri: str | None, phrases_uri: str | None = None) -> DecodingConfig:
        """`decoding` with the chosen setting (no LM where none helped, no phrases where boosting did not)."""
        best = self.best
        boosting = ({"phrases_uri": phrases_uri, "boost_weight": best.boost_weight} if self.boost_helps
                    else {"phrases_uri": None})
        if not self.lm_helps:
            return dataclasses.replace(decoding, lm_uri=None, lm_weight=0.0, **boosting)
        bonus = best.bonus if best.bonus is not None else decoding.ctc_insertion_bonus
        return dataclasses.replace(decoding, lm_uri=lm_uri, lm_weight=best.lm_weight, ctc_insertion_bonus=bonus,
                                   **boosting)


def beats_beyond_chance(candidate: Trial, reference: Trial) -> bool:
    """Whether the setting `candidate` is better than `reference` on dev beyond chance: a lower WER, and more
    utterances improved than made worse by a one-sided sign test at `SIGNIFICANCE` (where per-utterance errors are
    known). A tuned weight always finds some setting a word or two better on a small dev set, even for an LM of
    unrelated text or a list of names nobody says; that is not a reason to use it. Decides an LM against no LM,
    and boosting against the LM setting without it."""
    if candidate.wer >= reference.wer:
        return False
    if not candidate.errors or len(candidate.errors) != len(reference.errors):
        return True
    better = sum(b < a for a, b in zip(reference.errors, candidate.errors))
    worse = sum(b > a for a, b in zip(reference.errors, candidate.errors))
    return sign_test_p(better, worse) < SIGNIFICANCE


def tune(decoding: DecodingConfig, evaluate: Callable[..., Score], cache: TrialCache,
         progress: Callable[[Trial], None] = lambda trial: None, *, lm: bool = True,
         boost_weights: Sequence[float] = ()) -> TuningResult:
    """The search of the module docstring for one strategy. `evaluate(lm_weight, bonus)` decodes the dev set
    with that setting (weight 0: no LM) and scores it; where `boost_weights` are searched (a phrase list),
    `evaluate(lm_weight, bonus, boost_weight)` (boost weight 0: no boosting). `lm=False`: there is no LM (a phrase
    list alone), only the boost weight is searched."""
    bonus_used = takes_bonus(decoding)
    measure = evaluate if boost_weights else (lambda weight, bonus, boost: evaluate(weight, bonus))
    tried: list[Trial] = []
    decodes = 0

    def trial(weight: float, bonus: float | None, boost: float = 0.0) -> Trial:
        nonlocal decodes
        weight, boost = round(weight, 4), round(boost, 4)
        if weight == 0:
            bonus = decoding.ctc_insertion_bonus if bonus_used else None  # no LM: the configured bonus
        key = setting_key(weight, bonus, boost)
        found = next((t for t in tried if t.key == key), None) or cache.get(key)
        if found is None:
            started = time.perf_counter()
            measured = measure(weight, bonus, boost)
            found = Trial(weight, bonus, measured.wer, measured.cer, round(time.perf_counter() - started, 3),
                          measured.errors, boost, measured.written_wer, measured.written_cer)
            cache.add(found)
            decodes += 1
        if found not in tried:
            tried.append(found)
            progress(found)
        return found

    def best_of(trials: list[Trial]) -> Trial:
        return min(trials, key=lambda t: (t.wer, t.cer, t.lm_weight, t.bonus or 0.0, t.boost_weight))

    def search_weights(bonus: float | None, weights: Sequence[float]) -> Trial:
        line = [trial(w, bonus) for w in weights]
        for wider in WIDER_WEIGHTS:  # the best at the top edge: the optimum may lie beyond
            if best_of(line).lm_weight < max(t.lm_weight for t in line):
                break
            line.append(trial(wider, bonus))
        best = best_of(line)
        ordered = sorted({t.lm_weight for t in line})
        at = ordered.index(best.lm_weight)
        for neighbour in (ordered[at - 1] if at > 0 else None, ordered[at + 1] if at + 1 < len(ordered) else None):
            if neighbour is not None:
                line.append(trial((best.lm_weight + neighbour) / 2, bonus))
        return best_of(line)

    def with_boosting(unboosted: Trial) -> TuningResult:
        """The boost weight search at the LM setting `unboosted` (module docstring), and the result."""
        chosen = unboosted
        if boost_weights:
            weight, bonus = unboosted.lm_weight, unboosted.bonus
            best = best_of([unboosted] + [trial(weight, bonus, boost) for boost in boost_weights])
            if best.boost_weight > 0 and weight > 0:  # boosting took over part of the LM's work: the weight again
                best = best_of([best] + [trial(w, bonus, best.boost_weight)
                                         for w in (weight / RECHECK_LM_STEP, weight * RECHECK_LM_STEP)])
            chosen = best if beats_beyond_chance(best, unboosted) else unboosted
        return TuningResult(decoding.strategy, baseline, chosen, tried, decodes, cache.reused, unboosted)

    baseline = trial(0.0, None)
    if not lm:
        return with_boosting(baseline)
    best = search_weights(START_BONUS if bonus_used else None, COARSE_WEIGHTS)
    if bonus_used:
        best = best_of([trial(best.lm_weight, b) for b in BONUSES] + [best])
        weights = sorted({best.lm_weight * f for f in (0.75, 1.0, 1.25)})
        best = best_of([search_weights(best.bonus, weights), best])
        for _ in range(RIDGE_STEPS):  # weight and bonus trade off along a ridge: step along it and across it
            moves = [(best.lm_weight * WEIGHT_STEP, best.bonus + BONUS_STEP),
                     (best.lm_weight / WEIGHT_STEP, max(best.bonus - BONUS_STEP, 0.0)),
                     (best.lm_weight * WEIGHT_STEP, best.bonus), (best.lm_weight, best.bonus + BONUS_STEP)]
            moved = best_of([best] + [trial(w, b) for w, b in moves])
            if moved == best:
                break
            best = moved
    lm_trials = [t for t in tried if t.lm_weight > 0]
    best = best_of(lm_trials) if lm_trials else baseline
    return with_boosting(best if beats_beyond_chance(best, baseline) else baseline)
