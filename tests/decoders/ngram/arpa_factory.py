"""Random token-level ARPA files for tests: back-off LMs of any order, optionally pruned and with unknown labels.

The probabilities are not normalized (no reader cares); what matters is the structure: every n-gram's
suffix is listed (as Kneser-Ney training produces), and `drop_prefixes` removes some contexts of kept
n-grams, as SRILM or varikn pruning does, together with the n-grams that end in them.
"""

from __future__ import annotations

import random

from decoders.ngram.arpa import BOS_ID, EOS_ID, UNK_ID

Ngrams = dict[tuple[int, ...], tuple[float, float]]


def random_ngrams(rng: random.Random, order: int, vocab_size: int, ngrams_per_order: int = 40,
                  known_fraction: float = 0.8, with_unk: bool = True, drop_prefixes: float = 0.0) -> Ngrams:
    """{token ids: (log10 prob, log10 backoff)} of a random back-off LM over labels 0 .. vocab_size - 1."""
    known = [label for label in range(vocab_size) if rng.random() < known_fraction] or [0]

    def log10_prob() -> float:
        return round(-rng.uniform(0.05, 3.0), 4)

    def log10_backoff() -> float:
        return 0.0 if rng.random() < 0.2 else round(rng.uniform(-1.2, 0.4), 4)

    ngrams: Ngrams = {(label,): (log10_prob(), log10_backoff()) for label in known}
    ngrams[(BOS_ID,)] = (-99.0, log10_backoff())
    ngrams[(EOS_ID,)] = (log10_prob(), 0.0)
    if with_unk:
        ngrams[(UNK_ID,)] = (log10_prob(), 0.0)
    by_order = [[key for key in ngrams if key[0] not in (EOS_ID, UNK_ID)]]
    for k in range(2, order + 1):
        # a context extends only by tokens that keep every suffix listed: context[1:] + token is listed
        extensions: dict[tuple[int, ...], list[int]] = {}
        for key in by_order[-1] if k > 2 else [key for key in ngrams if len(key) == 1]:
            extensions.setdefault(key[:-1] if k > 2 else (), []).append(key[-1])
        contexts = [key for key in by_order[-1] if key[-1] != EOS_ID and extensions.get(key[1:])]
        grams: list[tuple[int, ...]] = []
        for _ in range(ngrams_per_order * 4):
            if len(grams) >= ngrams_per_order or not contexts:
                break
            context = rng.choice(contexts)
            token = rng.choice(extensions[context[1:]])
            key = context + (token,)
            if key in ngrams or token in (BOS_ID, UNK_ID):
                continue
            ngrams[key] = (log10_prob(), log10_backoff() if k < order and token != EOS_ID else 0.0)
            grams.append(key)
        if not grams:
            break
        by_order.append(grams)
    # clear backoffs of n-grams that end in </s> or are of the highest order: ARPA writes none there
    max_order = max(len(key) for key in ngrams)
    for key, (prob, _) in list(ngrams.items()):
        if len(key) == max_order or key[-1] == EOS_ID:
            ngrams[key] = (prob, 0.0)
    if drop_prefixes > 0:
        prefixes = {key[:-1] for key in ngrams if len(key) > 2}
        for prefix in sorted(prefixes):
            if len(prefix) >= 2 and prefix in ngrams and rng.random() < drop_prefixes:
                # drop the context and everything that ends in it; keep what extends it (the pruned shape)
                for key in [key for key in ngrams if len(key) >= len(prefix) and key[-len(prefix):] == prefix]:
                    del ngrams[key]
    return ngrams


def random_token_sequences(rng: random.Random, vocab_size: int, count: int, max_length: int,
                           ngrams: Ngrams | None = None) -> list[list[int]]:
    """Random label sequences; with `ngrams`, half of them follow listed n-grams so that long contexts match."""
    sequences = []
    long_grams = sorted((key for key in (ngrams or {}) if len(key) > 1 and EOS_ID not in key), key=len)
    for index in range(count):
        length = rng.randint(0, max_length)
        if long_grams and index % 2 == 0:
            sequence: list[int] = []
            while len(sequence) < length:
                gram = rng.choice(long_grams[len(long_grams) // 2 :])
                sequence.extend(token for token in gram if token >= 0)
            sequences.append(sequence[:length])
        else:
            sequences.append([rng.randrange(vocab_size) for _ in range(length)])
    return sequences
