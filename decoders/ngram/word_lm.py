"""Word-level ARPA files for token-level decoders: reading one, telling it from a token-level one, and turning
it into a token-level back-off LM.

Two conversions are here; `benchmarks/word_lm.py` measured them and `--lm` draws sentences
(`pipeline/lm/word_arpa.py`; the figures are in `docs/lm_bias.md`):

- `sample_word_sentences` ("sample", what `--lm` does): sentences drawn from the word LM exactly as its back-off
  formula defines the distribution (after context h a listed word with its probability; with the rest of the
  mass, a word of the shorter context's distribution that h does not list); the caller tokenizes them and
  estimates a token LM with the builder of `pipeline/lm/build.py`, whose smoothing spreads mass over token
  sequences as a token LM of text would.
- `spell_word_lm` ("spell", the candidate it was measured against): every word n-gram spelled out in tokens,
  renormalised per token history. Each word history `H` that is a context of the word LM is weighted by its
  probability `W(H)` (the chain rule from `()`, or from `<s>` times p(`</s>`): sentence starts per token); each
  word `w` it lists, spelled `t_1 .. t_m`, adds `W(H) p(w | H)` to the count of `t_k` after the token history
  `spell(H) t_1 .. t_k-1` (cut to its last `order - 1` tokens), and the mass of the words through a token
  history, the words that end there included, to its total. A token history takes its counts from the word
  histories that spell it, else from those that spell a longer history ending in it; the unigrams are the
  expected token counts of the word unigrams. A token's probability is its count over the total; what the
  listed tokens leave backs off, with the weight ARPA's normalisation gives. Where every word is one token and
  the orders match, this is the word LM itself; where the word LM backs off, a token's back-off cannot follow
  a word's, which is what it loses on held-out text. A word without tokens (`<unk>`, a word `tokenize`
  refuses) is left out: its mass backs off.

Values in ARPA files and in the n-gram dictionaries are log10; `{ids: (log10 prob, log10 backoff)}` with token
ids `>= 0` and `<s>`, `</s>`, `<unk>` as `BOS_ID`, `EOS_ID`, `UNK_ID` (as `decoders/ngram/arpa.py`, whose reader
and writer read and write word-level files too).
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Literal

from decoders.ngram.arpa import (
    BOS_ID,
    EOS_ID,
    KENLM_MISSING_UNK_LOG10,
    SPECIAL_NAMES,
    TOKEN_OFFSET,
    UNK_ID,
    ArpaNgram,
    add_missing_prefixes,
    backoff_log10_prob,
    iter_arpa,
    write_arpa,
)

Ngrams = dict[tuple[int, ...], tuple[float, float]]
Tokenize = Callable[[str], "Sequence[int] | None"]  # a word -> its token ids; None: the tokenizer cannot spell it

# KenLM's, SRILM's and varikn's spellings of the three special words (varikn writes <UNK>)
WORD_SPECIALS = {"<s>": BOS_ID, "</s>": EOS_ID, "<unk>": UNK_ID, "<UNK>": UNK_ID}
TOKEN_LEVEL_SHARE = 0.5  # an ARPA file whose unigrams are mostly token symbols is token-level
_MIN_BACKOFF_MASS = 1e-9  # a history whose listed tokens take (almost) all its mass keeps this much for backoff


class WordVocabulary:
    """word -> int id (in order of first sight; the special words their negative ids), and back."""

    def __init__(self) -> None:
        self.words: list[str] = []
        self.ids: dict[str, int] = {}

    def __call__(self, word: str) -> int:
        special = WORD_SPECIALS.get(word)
        if special is not None:
            return special
        found = self.ids.get(word)
        if found is None:
            found = self.ids[word] = len(self.words)
            self.words.append(word)
        return found


@dataclass
class WordArpa:
    """A word-level back-off LM: `ngrams` over word ids (`words[i]` spells id i), every pruned context restored."""

    path: str
    words: list[str]
    ngrams: Ngrams
    max_order: int

    def word(self, word_id: int) -> str:
        """The spelling of `word_id`: KenLM's `<s>`, `</s>`, `<unk>` for the special words."""
        return SPECIAL_NAMES[word_id] if word_id < 0 else self.words[word_id]

    def log10_prob(self, context: Sequence[int], word: int) -> float:
        """log10 p(word | context) by ARPA's back-off formula (the context cut to `max_order - 1` words)."""
        context = tuple(context)[max(len(context) - self.max_order + 1, 0):] if self.max_order > 1 else ()
        unk_log10 = self.ngrams.get((UNK_ID,), (KENLM_MISSING_UNK_LOG10, 0.0))[0]
        return backoff_log10_prob(self.ngrams, context, word, unk_log10)

    def log10_sentence(self, words: Sequence[int]) -> float:
        """log10 p(words </s> | <s>)."""
        history, total = [BOS_ID], 0.0
        for word in list(words) + [EOS_ID]:
            total += self.log10_prob(history, word)
            history.append(word)
        return total


def read_word_arpa(path: str | Path) -> WordArpa:
    """Read a word-level ARPA file (plain or gzip; KenLM's, SRILM's or varikn's spellings). Malformed input
    raises `ArpaFormatError` naming the file and the line (`iter_arpa`); contexts that pruning dropped are
    restored with their back-off probabilities (`add_missing_prefixes`)."""
    vocabulary = WordVocabulary()
    stream = iter_arpa(path, symbol_id=vocabulary)
    declared = next(stream)
    ngrams: Ngrams = {}
    for ngram in stream:
        ngrams[ngram.tokens] = (ngram.log10_prob, ngram.log10_backoff)
    add_missing_prefixes(ngrams, ngrams.get((UNK_ID,), (KENLM_MISSING_UNK_LOG10, 0.0))[0])
    return WordArpa(str(path), vocabulary.words, ngrams, len(declared))


def write_word_arpa(path: str | Path, word_lm: WordArpa) -> None:
    """Write a word LM in KenLM's spelling (`write_arpa`: tabs, `<unk>`, `<s>`, `</s>`; gzip for `.gz`)."""
    write_arpa(path, word_lm.ngrams, word_lm.word, max_order=word_lm.max_order)


def arpa_level(path: str | Path, vocab_size: int) -> Literal["token", "word"]:
    """Whether an ARPA file is token-level (its unigrams are token symbols `chr(id + 100)` of a vocabulary of
    `vocab_size`) or word-level, from its unigrams alone: token-level where more than `TOKEN_LEVEL_SHARE` of the
    unigrams other than `<s>`, `</s>`, `<unk>` are token symbols. (A word-level file's one-letter words such as
    "x" are symbols too, but few; a token-level file's unigrams are all symbols.)"""
    unigrams: list[str] = []

    def record(word: str) -> int:
        unigrams.append(word)
        return 0

    for item in iter_arpa(path, symbol_id=record):
        if isinstance(item, ArpaNgram) and item.order > 1:
            break
    words = [word for word in unigrams if word not in WORD_SPECIALS]
    symbols = sum(len(word) == 1 and 0 <= ord(word) - TOKEN_OFFSET < vocab_size for word in words)
    return "token" if not words or symbols > TOKEN_LEVEL_SHARE * len(words) else "word"


# --- conversion by spelling out --------------------------------------------------------------------------------
def spell_word_lm(word_lm: WordArpa, tokenize: Tokenize, order: int = 6) -> Ngrams:
    """The token-level back-off LM of order `order` that spells out `word_lm` (see the module docstring)."""
    if order < 1:
        raise ValueError(f"order must be >= 1, got {order}")
    spellings = _spellings(word_lm, tokenize)
    successors = _successors(word_lm)
    # per token history: counts of the next tokens and the total mass through it, from the word histories that
    # spell exactly it (cut to `keep` tokens: "own"), and from those that spell a longer history ending in it
    own = _Counts()
    suffixes = _Counts()
    unigram_counts: dict[int, float] = defaultdict(float)  # tokens of the words of the unigram distribution
    keep = order - 1  # token history length kept

    def add(history: tuple[int, ...], token: int | None, mass: float) -> None:
        """`mass` through token history `history`, going on with `token` (None: only to the total: the
        mass that ends a word here and backs off, or that the history's own words take)."""
        cut = _cut(history, keep)
        own.add(cut, token, mass)
        for length in range(len(cut)):
            suffixes.add(cut[len(cut) - length:], token, mass)

    eos_log10 = word_lm.ngrams.get((EOS_ID,), (-1.0, 0.0))[0]
    for history, listed in successors.items():
        spelled = _spell(history, spellings)
        if spelled is None:
            continue  # a history holding a word without tokens: its successors are reached by backing off
        if history and history[0] == BOS_ID:  # sentence starts, per token, as often as sentence ends
            weight = 10.0 ** (eos_log10 + _chain_log10(word_lm, history[1:], (BOS_ID,)))
        else:
            weight = 10.0 ** _chain_log10(word_lm, history, ())
        if weight == 0.0:
            continue
        # the mass through this history (its parent leaves the end of this word to it: the same token history)
        add(spelled, None, weight)
        for word, probability in listed:
            tokens = spellings.get(word)
            if tokens is None:
                continue  # backs off
            mass = weight * probability
            for k, token in enumerate(tokens):
                add(spelled + tokens[:k], token, mass)
                if not history:
                    unigram_counts[token] += mass
                if k > 0:
                    add(spelled + tokens[:k], None, mass)
            if word != EOS_ID and history + (word,) not in successors:
                # the word ends here and the next one comes from a shorter word context: where that context
                # spells the same (cut) token history, its own words go on from here; else the mass backs off
                ended = spelled + tokens
                shorter = _spell(_longest_context(history[1:] + (word,), successors), spellings)
                if shorter is None or _cut(shorter, keep) != _cut(ended, keep):
                    add(ended, None, mass)
    # a token history takes its counts from the word histories that spell it where any goes on from it
    counts = {**suffixes.counts, **own.counts}
    totals = {history: (own if history in own.counts else suffixes).totals.get(history, 0.0) for history in counts}
    counts[()] = unigram_counts
    return _normalise(counts, totals, word_lm.ngrams.get((UNK_ID,), (KENLM_MISSING_UNK_LOG10, 0.0))[0], order)


class _Counts:
    """Token counts and total mass per token history."""

    def __init__(self) -> None:
        self.counts: dict[tuple[int, ...], dict[int, float]] = defaultdict(lambda: defaultdict(float))
        self.totals: dict[tuple[int, ...], float] = defaultdict(float)

    def add(self, history: tuple[int, ...], token: int | None, mass: float) -> None:
        if token is None:
            self.totals[history] += mass
        else:
            self.counts[history][token] += mass


def _cut(history: tuple[int, ...], keep: int) -> tuple[int, ...]:
    return history[max(len(history) - keep, 0):] if keep else ()


def _spell(history: tuple[int, ...], spellings: dict[int, tuple[int, ...] | None]) -> tuple[int, ...] | None:
    """The token history of a word history (`<s>` stays `BOS_ID`); None if a word has no spelling."""
    spelled: tuple[int, ...] = ()
    for word in history:
        tokens = (BOS_ID,) if word == BOS_ID else spellings.get(word)
        if tokens is None:
            return None
        spelled += tokens
    return spelled


def _longest_context(history: tuple[int, ...], successors: dict) -> tuple[int, ...]:
    while history and history not in successors:
        history = history[1:]
    return history


def _spellings(word_lm: WordArpa, tokenize: Tokenize) -> dict[int, tuple[int, ...] | None]:
    spellings: dict[int, tuple[int, ...] | None] = {EOS_ID: (EOS_ID,), UNK_ID: None, BOS_ID: None}
    for word_id, word in enumerate(word_lm.words):
        tokens = tokenize(word)
        spellings[word_id] = tuple(int(t) for t in tokens) if tokens else None
    return spellings


def _successors(word_lm: WordArpa) -> dict[tuple[int, ...], list[tuple[int, float]]]:
    """context -> its listed words with linear probabilities; `()` holds the unigrams but `<s>` (never
    predicted)."""
    successors: dict[tuple[int, ...], list[tuple[int, float]]] = defaultdict(list)
    for key, (log10_prob, _) in word_lm.ngrams.items():
        if key[-1] == BOS_ID:
            continue
        successors[key[:-1]].append((key[-1], 10.0 ** log10_prob))
    return dict(successors)


def _chain_log10(word_lm: WordArpa, words: Sequence[int], start: tuple[int, ...]) -> float:
    history, total = list(start), 0.0
    for word in words:
        total += word_lm.log10_prob(history, word)
        history.append(word)
    return total


def _normalise(counts: dict[tuple[int, ...], dict[int, float]], totals: dict[tuple[int, ...], float],
               unk_log10: float, order: int) -> Ngrams:
    """Counts and totals per token history -> back-off n-grams: probabilities count / total, the unigrams
    normalised to leave `<unk>` its word-level probability, back-off weights by ARPA's normalisation, orders
    shortest first; a history missing as an n-gram of its own is added with the probability it has by backing
    off (so no probability changes)."""
    ngrams: Ngrams = {}
    unigram_counts = counts.get((), {})
    unigram_total = sum(unigram_counts.values())
    if unigram_total <= 0:
        raise ValueError("the word LM spells no token: no word could be tokenized")
    scale = (1.0 - 10.0 ** unk_log10) / unigram_total
    for token, count in unigram_counts.items():
        ngrams[(token,)] = (math.log10(count * scale), 0.0)
    ngrams[(UNK_ID,)] = (unk_log10, 0.0)
    ngrams[(BOS_ID,)] = (-99.0, 0.0)

    by_length: dict[int, list[tuple[int, ...]]] = defaultdict(list)
    for history in counts:
        if history:
            by_length[len(history)].append(history)
    for length in range(order):  # histories of this length get their back-off weights; their tokens enter
        histories = sorted(by_length.get(length, [()] if length == 0 else []))
        for history in histories:
            if history and history not in ngrams:
                ngrams[history] = (backoff_log10_prob(ngrams, history[:-1], history[-1], unk_log10), 0.0)
        entries: Ngrams = {}
        for history in histories:
            listed = counts[history]
            if history:
                total = max(totals.get(history, 0.0), sum(listed.values()))
                probabilities = {token: count / total for token, count in listed.items()}
                listed_mass = sum(probabilities.values())
                if listed_mass > 1.0 - _MIN_BACKOFF_MASS:  # rounding: keep a little mass for backing off
                    shrink = (1.0 - _MIN_BACKOFF_MASS) / listed_mass
                    probabilities = {token: p * shrink for token, p in probabilities.items()}
                    listed_mass = 1.0 - _MIN_BACKOFF_MASS
                lower_mass = sum(10.0 ** backoff_log10_prob(ngrams, history[1:], token, unk_log10) for token in listed)
            else:  # the unigrams, set above
                probabilities = {}
            if history:  # the unigrams have nowhere to back off to
                backoff = math.log10(max(1.0 - listed_mass, _MIN_BACKOFF_MASS)
                                     / max(1.0 - lower_mass, _MIN_BACKOFF_MASS))
                ngrams[history] = (ngrams[history][0], backoff)
            for token, probability in probabilities.items():
                entries[history + (token,)] = (math.log10(probability), 0.0)
        ngrams.update(entries)
    return ngrams


# --- conversion by sampling -------------------------------------------------------------------------------------
def sample_word_sentences(word_lm: WordArpa, num_sentences: int, seed: int = 0,
                          max_words: int = 200) -> Iterator[list[str]]:
    """`num_sentences` sentences (lists of words, without `<s>`/`</s>`) drawn from `word_lm` as its back-off
    formula defines it: after context h a listed word with its probability; with the rest of the mass (what the
    back-off weight stands for in a normalised LM), a word of the shorter context's distribution that h does not
    list (drawn from it, and drawn again while h lists it). `<unk>` is never drawn (it has no spelling); a
    sentence is cut at `max_words`."""
    rng = random.Random(seed)
    tables: dict[tuple[int, ...], tuple[list[int], list[float], float, frozenset[int]]] = {}
    for context, listed in _successors(word_lm).items():
        words = [word for word, _ in listed if word != UNK_ID]
        probabilities = [p for word, p in listed if word != UNK_ID]
        cumulative = list(accumulate(probabilities))
        mass = cumulative[-1] if cumulative else 0.0
        tables[context] = (words, cumulative, mass, frozenset(words))
    if () not in tables or not tables[()][0]:
        raise ValueError(f"{word_lm.path}: the word LM lists no unigram to draw")

    def draw(context: tuple[int, ...]) -> int:
        table = tables.get(context)
        if table is None:  # not a context: it backs off with weight one
            return draw(context[1:])
        words, cumulative, mass, listed = table
        if not context:  # the unigrams, normalised over the words drawn
            return words[min(bisect_right(cumulative, rng.random() * mass), len(words) - 1)]
        u = rng.random()
        if u < mass:
            return words[min(bisect_right(cumulative, u), len(words) - 1)]
        for _ in range(10_000):  # rejection: the shorter context's distribution without the words listed here
            word = draw(context[1:])
            if word not in listed:
                return word
        return word

    keep = word_lm.max_order - 1
    for _ in range(num_sentences):
        history: list[int] = [BOS_ID]
        sentence: list[str] = []
        while len(sentence) < max_words:
            word = draw(tuple(history[max(len(history) - keep, 0):]) if keep > 0 else ())
            if word == EOS_ID:
                break
            sentence.append(word_lm.words[word])
            history.append(word)
        yield sentence
