"""A slow, obvious back-off n-gram scorer over a dict, with its own tiny ARPA parser: an oracle for NgramLm.

p(w | h) = p_arpa(h w) if `h w` is listed, else backoff(h) + p(w | h[1:]), with backoff 0 for a context that
is not listed; a label the ARPA file does not list scores as `<unk>` (log10 -100 if there is none, as KenLM).
The history is the whole sentence so far, cut to the last N - 1 tokens. Tokens are `chr(id + 100)`.
Scores are natural logs. It shares no code with `decoders.ngram`: it knows words and a dict, not states or arcs.
"""

from __future__ import annotations

import gzip
import math

LN10 = math.log(10.0)


class DictNgramLm:
    def __init__(self, path: str) -> None:
        opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
        self.entries: dict[tuple[str, ...], tuple[float, float]] = {}
        order = 0
        with opener(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                line = line.strip("\r\n \t")
                if line.startswith("\\") and line.endswith("-grams:"):
                    order = int(line[1 : line.index("-")])
                    continue
                if not line or order == 0 or line == "\\end\\":
                    continue
                fields = [field for field in line.replace("\t", " ").split(" ") if field]
                words = tuple(fields[1 : order + 1])
                backoff = float(fields[order + 1]) if len(fields) > order + 1 else 0.0
                self.entries[words] = (float(fields[0]), backoff)
        self.max_order = max(len(key) for key in self.entries)
        unk = self.entries.get(("<unk>",))
        self.unk_log10 = unk[0] if unk is not None else -100.0
        self._known_contexts: set[tuple[str, ...]] | None = None

    def _word(self, word: str) -> str:
        return word if (word,) in self.entries else "<unk>"

    def log10_prob(self, history: tuple[str, ...], word: str) -> float:
        word = self._word(word)
        history = tuple(self._word(w) for w in history)[-(self.max_order - 1) :] if self.max_order > 1 else ()
        total = 0.0
        while True:
            listed = self.entries.get(history + (word,))
            if listed is not None:
                return total + listed[0]
            if not history:
                return total + self.unk_log10
            total += self.entries.get(history, (0.0, 0.0))[1]
            history = history[1:]

    def score(self, token_ids: list[int], bos: bool = True, eos: bool = True) -> float:
        """Natural-log probability of a token id sequence."""
        history: tuple[str, ...] = ("<s>",) if bos else ()
        total = 0.0
        for token in token_ids:
            word = chr(token + 100)
            total += self.log10_prob(history, word)
            history = history + (word,)
        if eos:
            total += self.log10_prob(history, "</s>")
        return total * LN10

    def next_scores(self, token_ids: list[int], vocab_size: int, bos: bool = True) -> list[float]:
        """Natural-log probability of every label 0 .. vocab_size - 1 after the sequence."""
        history = (("<s>",) if bos else ()) + tuple(chr(t + 100) for t in token_ids)
        return [self.log10_prob(history, chr(label + 100)) * LN10 for label in range(vocab_size)]

    def end_score(self, token_ids: list[int], bos: bool = True) -> float:
        """Natural-log probability of `</s>` after the sequence."""
        history = (("<s>",) if bos else ()) + tuple(chr(t + 100) for t in token_ids)
        return self.log10_prob(history, "</s>") * LN10

    def lists(self, label: int) -> bool:
        """Whether the file has a unigram for the label (else the label reads as `<unk>`)."""
        return (chr(label + 100),) in self.entries

    def contexts(self) -> list[tuple[str, ...]]:
        """The histories an LM must tell apart, as words: the empty one, `<s>`, and, below order N, every listed
        n-gram and every proper prefix of one (pruning may have dropped the prefix's own entry); none holds
        `</s>`, after which nothing is asked. Shortest first."""
        found = {(), ("<s>",)}
        if self.max_order > 1:
            for key in self.entries:
                found.update(key[:end] for end in range(1, min(len(key) + 1, self.max_order)))
        return sorted((key for key in found if "</s>" not in key), key=lambda key: (len(key), key))

    def context_after(self, context: tuple[str, ...], label: int) -> tuple[str, ...]:
        """The context that `context` then `label` leaves: the longest suffix of the two, shorter than N, that
        is one of `contexts()` (words, `<unk>` for a label the file does not list)."""
        if self._known_contexts is None:
            self._known_contexts = set(self.contexts())
        history = context + (self._word(chr(label + 100)),)
        for start in range(max(0, len(history) - self.max_order + 1), len(history) + 1):
            if history[start:] in self._known_contexts:
                return history[start:]
        return ()
