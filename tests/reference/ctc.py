"""Per-utterance CTC references, written to be obviously right: plain Python over one utterance at a time.

- `collapse_one`: blank collapse as the paper states it, run by run.
- `greedy_one`: CTC greedy, with NeMo's LM fusion rule spelled out frame by frame.
- `prefix_beam_search_one`: textbook CTC prefix beam search over a dict of prefixes, with token-level LM fusion.
- `exhaustive_best`: the best label sequence by enumerating every alignment (tiny T and V only).
- `BigramLm`: a table-driven fake `LanguageModel` (state = previous label + 1, 0 = start of sentence).

Labels are `0 .. V-1` with blank at `blank_id`; the LM sees `label - (label > blank_id)`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from decoders.hypotheses import Hypothesis


class BigramLm:
    """A bigram LM from tables: scores [V+1, V] and final scores [V+1] (row 0 = start of sentence)."""

    def __init__(self, scores: Tensor, final_scores: Tensor) -> None:
        self.vocab_size = scores.shape[1]
        if scores.shape[0] != self.vocab_size + 1 or final_scores.shape != (self.vocab_size + 1,):
            raise ValueError("scores must be [V+1, V] and final_scores [V+1]")
        self.scores = scores
        self.final = final_scores
        self.next_states = torch.arange(1, self.vocab_size + 1).expand(self.vocab_size + 1, -1).contiguous()

    @classmethod
    def random(cls, vocab_size: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> BigramLm:
        """Normalized random bigram probabilities, end of sentence included."""
        generator = torch.Generator().manual_seed(seed)
        logits = 2.0 * torch.randn(vocab_size + 1, vocab_size + 1, generator=generator, dtype=dtype)
        log_probs = torch.log_softmax(logits, dim=-1)
        return cls(log_probs[:, :vocab_size].contiguous(), log_probs[:, vocab_size].contiguous())

    @property
    def device(self) -> torch.device:
        return self.scores.device

    def to(self, device: torch.device | str) -> BigramLm:
        if torch.device(device) == self.device:
            return self
        moved = BigramLm(self.scores.to(device), self.final.to(device))
        moved.next_states = self.next_states.to(device)
        return moved

    def initial_states(self, batch_size: int) -> Tensor:
        return torch.zeros(batch_size, dtype=torch.long, device=self.device)

    def advance(self, states: Tensor) -> tuple[Tensor, Tensor]:
        return self.scores[states], self.next_states[states]

    def final_scores(self, states: Tensor) -> Tensor:
        return self.final[states]

    def score_labels(self, states: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """states [B], labels [B, M] -> scores and next states [B, M] (the optional fast path NgramLm offers)."""
        return self.scores[states.unsqueeze(1), labels], self.next_states[states.unsqueeze(1), labels]

    # per-utterance helpers for the references
    def score(self, state: int, lm_label: int) -> float:
        return float(self.scores[state, lm_label])

    def next_state(self, state: int, lm_label: int) -> int:
        return int(self.next_states[state, lm_label])


class AdvanceOnly:
    """Exactly the `LanguageModel` protocol of a wrapped LM, hiding any optional fast paths."""

    def __init__(self, lm) -> None:
        self.lm = lm
        self.vocab_size = lm.vocab_size

    @property
    def device(self) -> torch.device:
        return self.lm.device

    def to(self, device: torch.device | str) -> AdvanceOnly:
        moved = self.lm.to(device)
        return self if moved is self.lm else AdvanceOnly(moved)

    def initial_states(self, batch_size: int) -> Tensor:
        return self.lm.initial_states(batch_size)

    def advance(self, states: Tensor) -> tuple[Tensor, Tensor]:
        return self.lm.advance(states)

    def final_scores(self, states: Tensor) -> Tensor:
        return self.lm.final_scores(states)


def to_lm_label(label: int, blank_id: int) -> int:
    return label - 1 if label > blank_id else label


def collapse_one(log_probs: Tensor, blank_id: int, threshold: float | None) -> list[int]:
    """log_probs [T, V] of one utterance -> the original frames that blank collapse keeps, in order."""
    marked = []
    for t in range(log_probs.shape[0]):
        if threshold is None:
            marked.append(int(torch.argmax(log_probs[t])) == blank_id)
        else:
            marked.append(float(log_probs[t, blank_id]) > math.log(threshold))
    kept = []
    t = 0
    while t < len(marked):
        if not marked[t]:
            kept.append(t)
            t += 1
            continue
        end = t
        while end + 1 < len(marked) and marked[end + 1]:
            end += 1
        interior = len(kept) > 0 and end + 1 < len(marked)  # a label before the run and one after it
        if interior:
            kept.append(end)  # the run's last frame
        t = end + 1
    return kept


def greedy_one(log_probs: Tensor, blank_id: int, lm: BigramLm | None = None, lm_weight: float = 0.0) -> Hypothesis:
    """log_probs [T, V] of one utterance -> greedy hypothesis; with an LM, NeMo's fusion rule."""
    tokens, frames, token_scores = [], [], []
    score = 0.0
    previous = blank_id
    state = 0
    for t in range(log_probs.shape[0]):
        row = log_probs[t].tolist()
        label = max(range(len(row)), key=lambda v: (row[v], -v))  # first index of the maximum
        if label != blank_id and label != previous:
            if lm is not None and lm_weight != 0.0:
                candidates = [v for v in range(len(row)) if v not in (blank_id, previous)]
                fused = {v: row[v] + lm_weight * lm.score(state, to_lm_label(v, blank_id)) for v in candidates}
                label = max(candidates, key=lambda v: (fused[v], -v))
                lm_score = lm.score(state, to_lm_label(label, blank_id))
                state = lm.next_state(state, to_lm_label(label, blank_id))
                score += lm_weight * lm_score
            tokens.append(label)
            frames.append(t)
            token_scores.append(row[label])
            score += row[label]
        previous = label
    return Hypothesis(tokens=tokens, frame_indices=frames, durations=None, token_scores=token_scores, score=score)


def logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    high, low = max(a, b), min(a, b)
    return high + math.log1p(math.exp(low - high))


@dataclass
class _Prefix:
    p_blank: float = -math.inf
    p_label: float = -math.inf
    lm_total: float = 0.0
    lm_state: int = 0
    frames: list[int] = field(default_factory=list)
    token_scores: list[float] = field(default_factory=list)

    def score(self, length: int, lm_weight: float, insertion_bonus: float) -> float:
        return logaddexp(self.p_blank, self.p_label) + lm_weight * self.lm_total + insertion_bonus * length


def prefix_beam_search_one(
    log_probs: Tensor,
    blank_id: int,
    beam_size: int,
    lm=None,
    lm_weight: float = 0.0,
    insertion_bonus: float = 0.0,
    beam_threshold: float = math.inf,
    lm_end_of_sentence: bool = True,
    nbest: int = 1,
    max_labels_per_frame: int | None = None,
    token_min_log_prob: float = -math.inf,
) -> list[Hypothesis]:
    """log_probs [T, V] of one utterance -> its nbest hypotheses, best first (prefix beam search).

    Each frame: every prefix in the beam goes on as itself (through blank, or a repeat of its last label)
    and as itself plus each non-blank label; contributions to the same prefix add up. A prefix's frames and
    token scores come from whichever contribution is larger this frame: its own continuation, or its parent's
    extension (then its last label is stamped with this frame). Candidates more than `beam_threshold` below
    the best are dropped, the best `beam_size` kept. A frame starts new prefixes only with its
    `max_labels_per_frame` best non-blank labels, and of those only with labels of at least
    `token_min_log_prob`, or its best one; any label still adds to a prefix already in the beam.
    `lm` needs `score(state, label)`, `next_state(state, label)` and a `final` table (as `BigramLm` has).
    """
    use_lm = lm is not None and lm_weight != 0.0
    rows = log_probs.tolist()
    beams: dict[tuple[int, ...], _Prefix] = {(): _Prefix(p_blank=0.0)}
    for t, row in enumerate(rows):
        ranked = sorted((v for v in range(len(row)) if v != blank_id), key=lambda v: row[v], reverse=True)
        allowed = ranked[:max_labels_per_frame] if max_labels_per_frame is not None else ranked
        allowed = [v for i, v in enumerate(allowed) if i == 0 or row[v] >= token_min_log_prob]
        own: dict[tuple[int, ...], _Prefix] = {}  # continuations of prefixes in the beam
        extensions: dict[tuple[int, ...], _Prefix] = {}  # each prefix's parent extended by its last label
        for prefix, beam in beams.items():
            total = logaddexp(beam.p_blank, beam.p_label)
            own[prefix] = _Prefix(
                p_blank=total + row[blank_id],
                p_label=beam.p_label + row[prefix[-1]] if prefix else -math.inf,
                lm_total=beam.lm_total,
                lm_state=beam.lm_state,
                frames=beam.frames,
                token_scores=beam.token_scores,
            )
            for label in range(len(row)):
                if label == blank_id or (label not in allowed and prefix + (label,) not in beams):
                    continue  # pruned labels start no new prefix, but still flow into prefixes in the beam
                lm_label = to_lm_label(label, blank_id)
                extensions[prefix + (label,)] = _Prefix(
                    p_label=(beam.p_blank if prefix and label == prefix[-1] else total) + row[label],
                    lm_total=beam.lm_total + (lm.score(beam.lm_state, lm_label) if use_lm else 0.0),
                    lm_state=lm.next_state(beam.lm_state, lm_label) if use_lm else 0,
                    frames=beam.frames + [t],
                    token_scores=beam.token_scores + [row[label]],
                )
        candidates = dict(extensions)
        for prefix, continued in own.items():
            extension = extensions.get(prefix)
            if extension is None:
                candidates[prefix] = continued
                continue
            own_mass = logaddexp(continued.p_blank, continued.p_label)
            record = extension if extension.p_label > own_mass else continued
            candidates[prefix] = _Prefix(
                p_blank=continued.p_blank,
                p_label=logaddexp(continued.p_label, extension.p_label),
                lm_total=continued.lm_total,
                lm_state=continued.lm_state,
                frames=record.frames,
                token_scores=record.token_scores,
            )
        weight = lm_weight if use_lm else 0.0
        scored = {prefix: c.score(len(prefix), weight, insertion_bonus) for prefix, c in candidates.items()}
        best = max(scored.values())
        kept = [p for p in scored if scored[p] > -math.inf and not scored[p] < best - beam_threshold]
        kept.sort(key=lambda p: scored[p], reverse=True)
        beams = {p: candidates[p] for p in kept[:beam_size]}

    results = []
    for prefix, beam in beams.items():
        score = beam.score(len(prefix), lm_weight if use_lm else 0.0, insertion_bonus)
        if use_lm and lm_end_of_sentence:
            score += lm_weight * float(lm.final[beam.lm_state])
        results.append(
            Hypothesis(
                tokens=list(prefix),
                frame_indices=list(beam.frames),
                durations=None,
                token_scores=list(beam.token_scores),
                score=score,
            )
        )
    results.sort(key=lambda h: h.score, reverse=True)
    return results[:nbest]


def exhaustive_best(
    log_probs: Tensor, blank_id: int, lm=None, lm_weight: float = 0.0, insertion_bonus: float = 0.0
) -> tuple[list[int], float]:
    """The label sequence with the best `log P(labels | x) + lm_weight * log P_lm(labels, </s>) + bonus * length`,
    where P(labels | x) sums over every alignment (all V^T of them are enumerated), and its score."""
    frames, num_labels = log_probs.shape
    rows = log_probs.tolist()
    totals: dict[tuple[int, ...], float] = {}
    for path in itertools.product(range(num_labels), repeat=frames):
        labels = tuple(v for t, v in enumerate(path) if v != blank_id and (t == 0 or path[t - 1] != v))
        totals[labels] = logaddexp(totals.get(labels, -math.inf), sum(rows[t][v] for t, v in enumerate(path)))

    def lm_score(labels: tuple[int, ...]) -> float:
        if lm is None or lm_weight == 0.0:
            return 0.0
        state, score = 0, 0.0
        for label in labels:
            score += lm.score(state, to_lm_label(label, blank_id))
            state = lm.next_state(state, to_lm_label(label, blank_id))
        return lm_weight * (score + float(lm.final[state]))

    scores = {labels: p + lm_score(labels) + insertion_bonus * len(labels) for labels, p in totals.items()}
    best = max(scores, key=scores.get)
    return list(best), scores[best]


# --- synthetic inputs shared by the tests and benchmarks/ctc.py -------------------------------------------
def peaky_emissions(
    batch_size: int,
    frames: int,
    num_labels: int,
    blank_id: int,
    seed: int = 0,
    confident_blank_fraction: float = 0.6,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """log_probs [B, T, V] shaped like a trained CTC model's (see `peaky_emissions_with_tokens`)."""
    return peaky_emissions_with_tokens(batch_size, frames, num_labels, blank_id, seed, confident_blank_fraction, dtype)[
        0
    ]


def peaky_emissions_with_tokens(
    batch_size: int,
    frames: int,
    num_labels: int,
    blank_id: int,
    seed: int = 0,
    confident_blank_fraction: float = 0.6,
    dtype: torch.dtype = torch.float32,
    lm: BigramLm | None = None,
    rival_wins: float = 0.0,
) -> tuple[Tensor, list[list[int]]]:
    """log_probs [B, T, V] shaped like a trained CTC model's, and the label sequences they spell.

    Label spikes of 1-2 frames, each followed by one uncertain frame, are separated by runs of confident
    blanks (p(blank) > 0.9, most > 0.999) that make up about `confident_blank_fraction` of the frames. A third
    of the spikes have a close rival label, so beam search and LM fusion have decisions to make; with
    `rival_wins` > 0 a rival can outscore the true label (by up to `rival_wins` nats), which greedy decoding
    gets wrong and an LM that knows the text can fix. Labels are drawn uniformly, or from `lm` when given
    (a sentence end starts a new sentence).
    """
    generator = torch.Generator().manual_seed(seed)

    def uniform(low: float, high: float, *shape: int) -> Tensor:
        return low + (high - low) * torch.rand(*shape, generator=generator, dtype=torch.float64)

    non_blank = [v for v in range(num_labels) if v != blank_id]
    log_v = math.log(max(num_labels, 2))
    logits = torch.randn(batch_size, frames, num_labels, generator=generator, dtype=torch.float64)
    # segments: a blank run (mean length chosen for the fraction), a spike of 1-2 frames, one uncertain frame
    spike_frames = 1.5 + 1.0
    mean_run = max(confident_blank_fraction * spike_frames / max(1.0 - confident_blank_fraction, 1e-6), 0.0)
    spelled: list[list[int]] = []
    for b in range(batch_size):
        t = 0
        lm_state = 0
        spelled.append([])
        while t < frames:
            run = int(torch.poisson(torch.tensor([mean_run]), generator=generator).item())
            for _ in range(run):
                if t >= frames:
                    break
                logits[b, t, blank_id] += log_v + float(uniform(4.0, 12.0, 1))
                t += 1
            if t >= frames or not non_blank:
                continue
            if lm is None:
                label = non_blank[int(torch.randint(len(non_blank), (1,), generator=generator))]
            else:
                while True:  # the next label, or the end of a sentence and a new one
                    row = torch.cat([lm.scores[lm_state], lm.final[lm_state : lm_state + 1]]).double().exp()
                    lm_label = int(torch.multinomial(row, 1, generator=generator))
                    if lm_label < len(non_blank):
                        lm_state = lm_label + 1
                        break
                    lm_state = 0
                label = non_blank[lm_label]
            rival = non_blank[int(torch.randint(len(non_blank), (1,), generator=generator))]
            has_rival = float(uniform(0.0, 1.0, 1)) < 1 / 3
            spelled[b].append(label)
            for _ in range(1 + int(float(uniform(0.0, 1.0, 1)) < 0.5)):
                if t >= frames:
                    break
                boost = log_v + float(uniform(2.0, 8.0, 1))
                logits[b, t, label] += boost
                if has_rival:
                    logits[b, t, rival] += boost - float(uniform(-rival_wins, 1.5, 1))
                logits[b, t, blank_id] += log_v + float(uniform(-4.0, 0.0, 1))
                t += 1
            if t < frames:  # the transition frame: blank likely but not confident
                logits[b, t, blank_id] += log_v + float(uniform(0.0, 2.0, 1))
                logits[b, t, label] += log_v + float(uniform(-1.0, 1.0, 1))
                t += 1
    return torch.log_softmax(logits, dim=-1).to(dtype), spelled


def random_bigram_arpa(
    vocab_size: int, seed: int = 0, listed_per_context: int | None = None
) -> tuple[dict[tuple[str | int, ...], tuple[float, float]], BigramLm]:
    """A random token-level bigram LM, as ARPA n-grams and as the `BigramLm` with exactly the same scores.

    N-gram keys hold token ids and the strings "<s>", "</s>", "<unk>"; values are (log10 prob, log10 backoff),
    rounded to the 7 significant digits an ARPA file keeps, and the `BigramLm` is computed from the rounded
    values with the backoff formula. `listed_per_context` limits each context's listed bigrams to its most
    likely next words (the rest back off to unigrams); None lists every bigram.
    """
    generator = torch.Generator().manual_seed(seed)
    words = list(range(vocab_size)) + ["</s>"]
    rounded = lambda x: float(f"{x:.7g}")  # noqa: E731

    unigram = torch.softmax(torch.randn(vocab_size + 1, generator=generator, dtype=torch.float64), dim=0)
    ngrams: dict[tuple, tuple[float, float]] = {("<unk>",): (-100.0, 0.0)}
    unigram_log10 = [rounded(math.log10(float(p))) for p in unigram]
    scores = torch.zeros(vocab_size + 1, vocab_size, dtype=torch.float64)
    final = torch.zeros(vocab_size + 1, dtype=torch.float64)
    contexts = ["<s>"] + list(range(vocab_size))
    backoffs = {}
    for row, context in enumerate(contexts):
        conditional = torch.softmax(2.0 * torch.randn(vocab_size + 1, generator=generator, dtype=torch.float64), 0)
        if listed_per_context is None or listed_per_context >= vocab_size + 1:
            listed = list(range(vocab_size + 1))
        else:
            listed = conditional.topk(listed_per_context).indices.tolist()
        listed_mass = float(conditional[listed].sum())
        unigram_mass = float(unigram[listed].sum())
        if len(listed) == vocab_size + 1:
            backoff_log10 = 0.0
        else:
            backoff_log10 = rounded(math.log10((1.0 - listed_mass) / (1.0 - unigram_mass)))
        backoffs[context] = backoff_log10
        listed_log10 = {w: rounded(math.log10(float(conditional[w]))) for w in listed}
        for w in range(vocab_size + 1):
            log10 = listed_log10[w] if w in listed_log10 else backoff_log10 + unigram_log10[w]
            if w < vocab_size:
                scores[row, w] = log10 * math.log(10.0)
            else:
                final[row] = log10 * math.log(10.0)
        for w, value in listed_log10.items():
            ngrams[(context, words[w])] = (value, 0.0)
    ngrams[("<s>",)] = (-99.0, backoffs["<s>"])
    for w in range(vocab_size):
        ngrams[(w,)] = (unigram_log10[w], backoffs[w])
    ngrams[("</s>",)] = (unigram_log10[vocab_size], 0.0)
    return ngrams, BigramLm(scores, final)


def nemo_symbol(token: int) -> str:
    """NeMo's token-level ARPA convention: token id i is the character chr(i + 100)."""
    return chr(token + 100)


def write_token_arpa(path, ngrams: dict[tuple, tuple[float, float]], symbol=nemo_symbol) -> None:
    """Write n-grams from `random_bigram_arpa` as an ARPA file, tokens spelled by `symbol`, fields tab-separated
    and every unigram with its backoff (pyctcdecode-style readers take unigrams only from 3-field lines)."""
    by_order: dict[int, list[tuple]] = {}
    for key in ngrams:
        by_order.setdefault(len(key), []).append(key)
    spell = lambda key: " ".join(w if isinstance(w, str) else symbol(w) for w in key)  # noqa: E731
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        out.write("\\data\\\n")
        for order in sorted(by_order):
            out.write(f"ngram {order}={len(by_order[order])}\n")
        for order in sorted(by_order):
            out.write(f"\n\\{order}-grams:\n")
            for key in by_order[order]:
                log10_prob, log10_backoff = ngrams[key]
                if order == 1 and key != ("</s>",):
                    out.write(f"{log10_prob:.7g}\t{spell(key)}\t{log10_backoff:.7g}\n")
                else:
                    out.write(f"{log10_prob:.7g}\t{spell(key)}\n")
        out.write("\n\\end\\\n")


def sequence_score(
    log_probs: Tensor, tokens: list[int], blank_id: int, lm: BigramLm | None = None, lm_weight: float = 0.0
) -> float:
    """Exact `log P(tokens | x)` (CTC forward algorithm over every alignment) plus
    `lm_weight * log P_lm(tokens, </s>)`, for log_probs [T, V] of one utterance."""
    if tokens:
        nll = torch.nn.functional.ctc_loss(
            log_probs.double().unsqueeze(1),
            torch.tensor([tokens]),
            torch.tensor([log_probs.shape[0]]),
            torch.tensor([len(tokens)]),
            blank=blank_id,
            reduction="none",
        )
        acoustic = -float(nll)
    else:
        acoustic = float(log_probs[:, blank_id].double().sum())
    if lm is None or lm_weight == 0.0:
        return acoustic
    state, lm_score = 0, 0.0
    for token in tokens:
        lm_score += lm.score(state, to_lm_label(token, blank_id))
        state = lm.next_state(state, to_lm_label(token, blank_id))
    return acoustic + lm_weight * (lm_score + float(lm.final[state]))
