"""Per-token and per-word confidence, batched, with NeMo 3.0's definitions (`asr_confidence_utils`).

- `token_confidence`: a measure of one distribution, mapped to [0, 1]: `max_prob` (the best label's
  probability, raised to `alpha` when alpha != 1) or a normalised entropy (Gibbs, Tsallis or Renyi, with
  `alpha`; `lin` or `exp` normalisation). With `alpha == 1` every entropy is the Shannon (Gibbs) one. `V` in
  the normalisation is `vocab_size` (NeMo: the number of labels with blank, also for TDT durations).
- Transducer greedy (NeMo's `compute_confidence` of `rnnt_decoding.py`): with `exclude_blank` a token's
  confidence is that of the step that emitted it (TDT with `tdt_include_duration`: the aggregate of the label
  and duration measures of that step). Without it, blank steps join the token emitted before them
  (`aggregation` of the token's step and theirs; blanks before the first token are dropped): for TDT every
  blank step; for RNN-T one blank per frame strictly after the token's frame (the blank that closes the
  token's own frame is not counted).
- CTC greedy (`ctc_decoding.py`): with `exclude_blank` the aggregate over the token's run of frames; without
  it, over the frames from the token's first frame to the next token's (trailing blanks included).
- Words (`word_confidence`): the aggregate of the tokens of each word; `sentencepiece_word_starts` marks the
  words as NeMo's SentencePiece rule does.

Dims: B batch, T frames, U tokens, V labels, S segments (tokens or words).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

Aggregation = Literal["min", "max", "mean", "prod"]


@dataclass(frozen=True)
class ConfidenceMethodConfig:
    name: Literal["max_prob", "entropy"] = "entropy"
    entropy_type: Literal["gibbs", "tsallis", "renyi"] = "tsallis"
    alpha: float = 0.33
    entropy_norm: Literal["exp", "lin"] = "exp"

    def __post_init__(self) -> None:
        if self.name not in ("max_prob", "entropy"):
            raise ValueError(f"name must be max_prob or entropy, got {self.name!r}")
        if self.entropy_type not in ("gibbs", "tsallis", "renyi"):
            raise ValueError(f"entropy_type must be gibbs, tsallis or renyi, got {self.entropy_type!r}")
        if self.entropy_norm not in ("exp", "lin"):
            raise ValueError(f"entropy_norm must be exp or lin, got {self.entropy_norm!r}")
        if not self.alpha > 0.0:
            raise ValueError(f"alpha must be > 0, got {self.alpha}")


@dataclass(frozen=True)
class ConfidenceConfig:
    """NeMo's `ConfidenceConfig` (same names and defaults). Decoders given one carry per-token confidence;
    the `preserve_*` flags are kept for callers that mirror NeMo's configuration."""

    preserve_frame_confidence: bool = False
    preserve_token_confidence: bool = False
    preserve_word_confidence: bool = False
    exclude_blank: bool = True
    aggregation: Aggregation = "min"
    tdt_include_duration: bool = False
    method_cfg: ConfidenceMethodConfig = field(default_factory=ConfidenceMethodConfig)

    def __post_init__(self) -> None:
        if self.aggregation not in ("min", "max", "mean", "prod"):
            raise ValueError(f"aggregation must be min, max, mean or prod, got {self.aggregation!r}")


def token_confidence(log_probs: Tensor, config: ConfidenceConfig | ConfidenceMethodConfig,
                     vocab_size: int | None = None) -> Tensor:
    """log_probs [..., V] (normalised) -> confidence [...] in [0, 1]; `vocab_size` overrides V in the
    normalisation (NeMo uses the label count for TDT duration distributions too)."""
    method = config.method_cfg if isinstance(config, ConfidenceConfig) else config
    v = float(vocab_size if vocab_size is not None else log_probs.shape[-1])
    a = float(method.alpha)
    # One temporary of the input's size at most, updated in place: this runs on every CTC frame. -inf
    # log-probs (p = 0) need nan_to_num only where they meet a product (0 * -inf); exp and max take them as is.
    if method.name == "max_prob":
        best = log_probs.max(dim=-1).values
        scale = v**a  # alpha == 1 gives the plain (p * V - 1) / (V - 1)
        return (torch.exp(a * best) * scale - 1.0) / (scale - 1.0)
    if a == 1.0:
        x = torch.nan_to_num(log_probs)
        neg_entropy = x.exp().mul_(x).sum(dim=-1)  # -H, Shannon
        if method.entropy_norm == "lin":
            return 1.0 + neg_entropy / math.log(v)
        return (neg_entropy.exp() * v - 1.0) / (v - 1.0)
    if method.entropy_type == "gibbs":
        x = torch.nan_to_num(log_probs)
        neg_entropy = torch.mul(x, a).exp_().mul_(x).sum(dim=-1)
        if method.entropy_norm == "lin":
            return 1.0 + neg_entropy / math.log(v) / v ** (1.0 - a)
        floor = v ** (-a * v ** (1.0 - a))  # exp(-alpha * max entropy)
        return (torch.exp(a * neg_entropy) - floor) / (1.0 - floor)
    power_sum = torch.mul(log_probs, a).exp_().sum(dim=-1)  # sum_i p_i^alpha
    if method.entropy_type == "tsallis":
        if method.entropy_norm == "lin":
            return 1.0 + (1.0 - power_sum) / (v ** (1.0 - a) - 1.0)
        floor = math.exp((1.0 - v ** (1.0 - a)) / (1.0 - a))
        return (torch.exp((1.0 - power_sum) / (1.0 - a)) - floor) / (1.0 - floor)
    # renyi
    if method.entropy_norm == "lin":
        return 1.0 + torch.log2(power_sum) / (a - 1.0) / math.log2(v)
    return (power_sum ** (1.0 / (a - 1.0)) * v - 1.0) / (v - 1.0)


def step_confidence(logits: Tensor, num_labels: int, config: ConfidenceConfig, with_durations: bool = False) -> Tensor:
    """A transducer step's joint logits [..., V (+N)] -> its confidence [...]: the measure of the label
    distribution, and for TDT with `tdt_include_duration` that of the duration distribution aggregated with it
    (NeMo normalises both by the V labels)."""
    confidence = token_confidence(torch.log_softmax(logits[..., :num_labels], dim=-1), config, num_labels)
    if with_durations and config.tdt_include_duration:
        durations = token_confidence(torch.log_softmax(logits[..., num_labels:], dim=-1), config, num_labels)
        confidence = aggregate_pair(config.aggregation, confidence, durations)
    return confidence


# --- aggregation -----------------------------------------------------------------------------------------
_IDENTITY = {"min": math.inf, "max": -math.inf, "prod": 1.0, "mean": 0.0}


def aggregation_identity(aggregation: Aggregation) -> float:
    """The value an empty running aggregate starts from (mean keeps a sum and a count)."""
    return _IDENTITY[aggregation]


def combine(aggregation: Aggregation, left: Tensor, right: Tensor) -> Tensor:
    """Fold two running aggregates (for mean: two sums)."""
    if aggregation == "min":
        return torch.minimum(left, right)
    if aggregation == "max":
        return torch.maximum(left, right)
    if aggregation == "prod":
        return left * right
    return left + right


def reduce_masked(aggregation: Aggregation, values: Tensor, include: Tensor, dim: int = -1) -> tuple[Tensor, Tensor]:
    """Running aggregate (mean: sum) and count of `values` where `include`, along `dim`."""
    filled = torch.where(include, values, aggregation_identity(aggregation))
    if aggregation == "min":
        reduced = filled.amin(dim=dim)
    elif aggregation == "max":
        reduced = filled.amax(dim=dim)
    elif aggregation == "prod":
        reduced = filled.prod(dim=dim)
    else:
        reduced = filled.sum(dim=dim)
    return reduced, include.sum(dim=dim)


def aggregate_pair(aggregation: Aggregation, first: Tensor, second: Tensor) -> Tensor:
    """The aggregate of two values (TDT: label and duration confidence of one step)."""
    if aggregation == "mean":
        return (first + second) / 2.0
    return combine(aggregation, first, second)


def segment_reduce(values: Tensor, segment_ids: Tensor, num_segments: int, aggregation: Aggregation) -> Tensor:
    """values [B, N], segment_ids [B, N] (-1: dropped) -> the aggregate of each segment [B, S]; empty
    segments hold 0."""
    batch_size = values.shape[0]
    index = torch.where(segment_ids < 0, num_segments, segment_ids)
    out = values.new_zeros(batch_size, num_segments + 1)
    reduce = {"min": "amin", "max": "amax", "prod": "prod", "mean": "mean"}[aggregation]
    out.scatter_reduce_(1, index, values, reduce=reduce, include_self=False)
    return out[:, :num_segments]


def word_confidence(token_confidence: Tensor, word_start_mask: Tensor, token_lengths: Tensor,
                    aggregation: Aggregation = "min", token_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """token_confidence [B, U], word_start_mask [B, U] (token begins a word), token_lengths [B] ->
    (word confidence [B, W], word_lengths [B]). The first kept token of a row always begins a word; tokens
    outside `token_mask` (if given) belong to no word. W is the most words in a row (one host sync)."""
    batch_size, max_tokens = token_confidence.shape
    kept = torch.arange(max_tokens, device=token_confidence.device) < token_lengths.unsqueeze(1)
    if token_mask is not None:
        kept = kept & token_mask
    first_kept = kept & (kept.long().cumsum(dim=1) == 1)
    starts = kept & (word_start_mask | first_kept)
    word_ids = torch.where(kept, starts.long().cumsum(dim=1) - 1, -1)
    word_lengths = starts.sum(dim=1)
    num_words = int(word_lengths.max()) if batch_size > 0 and max_tokens > 0 else 0
    return segment_reduce(token_confidence, word_ids, num_words, aggregation), word_lengths


def sentencepiece_word_starts(tokens: Tensor, token_lengths: Tensor, piece_differs: Tensor,
                              unk_id: int | None = None, space_id: int | None = None) -> tuple[Tensor, Tensor]:
    """NeMo's word split for SentencePiece models. tokens [B, U] -> (word_start_mask, token_mask), both [B, U].

    `piece_differs` [V] bool: the token's piece differs from its decoded text (it carries the word marker
    '▁'); such a token, or any token after `unk_id`, begins a word. A lone '▁' (`space_id`) that is followed
    by a word start or ends the row belongs to no word (`token_mask` False), as in NeMo.
    """
    starts = piece_differs.to(tokens.device)[tokens]
    if unk_id is not None:
        after_unk = torch.zeros_like(starts)
        after_unk[:, 1:] = tokens[:, :-1] == unk_id
        starts = starts | after_unk
    token_mask = torch.ones_like(starts)
    if space_id is not None:
        next_starts = torch.ones_like(starts)
        next_starts[:, :-1] = starts[:, 1:]
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        next_starts |= positions.unsqueeze(0) + 1 >= token_lengths.unsqueeze(1)
        token_mask = ~((tokens == space_id) & next_starts)
    return starts, token_mask


# --- CTC -------------------------------------------------------------------------------------------------
def ctc_token_confidence(log_probs: Tensor, labels: Tensor, emitted: Tensor, lengths: Tensor,
                         blank_id: int, config: ConfidenceConfig, num_tokens: int) -> Tensor:
    """log_probs [B, T, V], frame labels [B, T], emitted [B, T] (a token starts here), lengths [B] ->
    token confidence [B, U] (module docstring).

    Only the frames that join a token count (inside the lengths, from the first token on, and with
    exclude_blank not blank); when they are fewer than half, they are gathered before the measure, so padding
    and the blank frames of a trained model (most of them, with exclude_blank) cost nothing.
    """
    inside = torch.arange(labels.shape[1], device=labels.device) < lengths.unsqueeze(1)
    token_ids = emitted.long().cumsum(dim=1) - 1  # the token each frame follows
    include = inside & (token_ids >= 0)
    if config.exclude_blank:
        include &= labels != blank_id
    rows, frames = include.nonzero(as_tuple=True)
    if 2 * len(rows) < include.numel():  # a trained model's blank frames (exclude_blank): gather, then measure
        frame_confidence = token_confidence(log_probs[rows, frames], config)  # [N]
    else:  # most frames count (exclude_blank=False, or a label on most frames): measure without the copy
        frame_confidence = token_confidence(log_probs, config)[rows, frames]
    out = frame_confidence.new_zeros(labels.shape[0], num_tokens + 1)
    if num_tokens > 0:
        reduce = {"min": "amin", "max": "amax", "prod": "prod", "mean": "mean"}[config.aggregation]
        flat_index = rows * (num_tokens + 1) + token_ids[rows, frames]
        out.view(-1).scatter_reduce_(0, flat_index, frame_confidence, reduce=reduce, include_self=False)
    return out[:, :num_tokens]
