"""Length bucketing: pack utterances into batches of similar duration, within one streaming window.

There is no global sort (it would materialize the whole corpus): the pipeline hands this module one window
of rows at a time (a large Ray batch), and the window is sorted and packed here. Padded seconds of a batch
= its size x its longest utterance; a batch is bounded by total padded seconds and by its size.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def plan_batches(durations_s: np.ndarray, max_batch_duration_s: float, max_batch_size: int,
                 max_rows_at: Callable[[float], int] | None = None) -> list[np.ndarray]:
    """Indices of `durations_s` grouped into batches, longest utterances first.

    Sorting the window longest-first lets each batch's first row fix its padded length; the batch then takes
    as many of the following (shorter or equal) rows as fit in `max_batch_duration_s` of padded audio (inf: no
    bound), `max_batch_size` rows and `max_rows_at(longest_s)` rows where given (what memory holds at that length,
    `pipeline/model/memory.py::BatchSizing.max_rows`). An utterance longer than the budget gets a batch of its own.
    Every index appears in exactly one batch.
    """
    durations_s = np.asarray(durations_s, dtype=np.float64)
    if durations_s.ndim != 1:
        raise ValueError(f"durations_s must be 1-D, got shape {durations_s.shape}")
    if max_batch_duration_s <= 0 or max_batch_size < 1:
        raise ValueError(f"need max_batch_duration_s > 0 and max_batch_size >= 1, got {max_batch_duration_s}, "
                         f"{max_batch_size}")
    if np.any(~np.isfinite(durations_s)) or np.any(durations_s < 0):
        raise ValueError("durations_s must be finite and non-negative")
    order = np.argsort(-durations_s, kind="stable")
    batches = []
    start = 0
    while start < len(order):
        longest = durations_s[order[start]]
        # (compare before dividing: a tiny duration would overflow the quotient)
        fits = max_batch_size
        if math.isfinite(max_batch_duration_s) and longest * max_batch_size > max_batch_duration_s:
            fits = int(max_batch_duration_s // longest)
        if max_rows_at is not None:
            fits = min(fits, max_rows_at(float(longest)))
        size = max(1, min(max_batch_size, fits, len(order) - start))
        batches.append(order[start : start + size])
        start += size
    return batches


def padded_seconds(durations_s: np.ndarray, batches: list[np.ndarray]) -> float:
    """Audio seconds the batches occupy once padded to their longest row."""
    durations_s = np.asarray(durations_s, dtype=np.float64)
    return float(sum(len(batch) * durations_s[batch].max() for batch in batches if len(batch)))


def padding_efficiency(durations_s: np.ndarray, batches: list[np.ndarray]) -> float:
    """Real audio seconds / padded seconds (1.0 = no padding at all)."""
    padded = padded_seconds(durations_s, batches)
    real = float(sum(np.asarray(durations_s, dtype=np.float64)[batch].sum() for batch in batches))
    return real / padded if padded > 0 else 1.0
