from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.stages.bucketing import padded_seconds, padding_efficiency, plan_batches


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.0, 60.0, allow_nan=False), max_size=300),
    st.floats(1.0, 400.0),
    st.integers(1, 64),
)
def test_every_row_once_and_budgets_respected(durations, budget, max_size):
    durations = np.array(durations)
    batches = plan_batches(durations, budget, max_size)
    flat = np.concatenate(batches) if batches else np.array([], dtype=int)
    assert sorted(flat.tolist()) == list(range(len(durations)))
    for batch in batches:
        assert 1 <= len(batch) <= max_size
        # over budget only when a single utterance is longer than the budget by itself
        assert len(batch) * durations[batch].max() <= budget or len(batch) == 1


def test_sorted_longest_first_packs_similar_lengths():
    durations = np.array([1.0, 10.0, 1.1, 9.5, 1.2, 9.8])
    batches = plan_batches(durations, max_batch_duration_s=30.0, max_batch_size=8)
    assert [sorted(b.tolist()) for b in batches] == [[1, 3, 5], [0, 2, 4]]
    assert padded_seconds(durations, batches) == pytest.approx(30.0 + 3.6)
    assert padding_efficiency(durations, batches) == pytest.approx(durations.sum() / 33.6)


def test_bucketing_beats_arrival_order_on_lognormal_durations():
    rng = np.random.default_rng(0)
    durations = np.clip(rng.lognormal(mean=1.8, sigma=0.7, size=2000), 1.0, 30.0)
    bucketed = plan_batches(durations, max_batch_duration_s=240.0, max_batch_size=64)
    arrival = [np.arange(i, min(i + 16, len(durations))) for i in range(0, len(durations), 16)]
    assert padding_efficiency(durations, bucketed) > 0.95
    assert padding_efficiency(durations, arrival) < 0.6


def test_bad_arguments():
    with pytest.raises(ValueError, match="1-D"):
        plan_batches(np.zeros((2, 2)), 10.0, 4)
    with pytest.raises(ValueError, match="max_batch"):
        plan_batches(np.ones(3), 0.0, 4)
    with pytest.raises(ValueError, match="non-negative"):
        plan_batches(np.array([1.0, -1.0]), 10.0, 4)
    assert plan_batches(np.array([]), 10.0, 4) == []
