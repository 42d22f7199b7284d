"""`pipeline/stages/rows.py::RunTotals`: the run's figures added up part by part equal the sums over every part's
summary row, and cost the same at the ten-thousandth part as at the first (the driver updates its progress at every
committed part; a million rows are thousands of parts)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from pipeline import schema
from pipeline.stages.rows import RunTotals, summarize


def summary_rows(count: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(count):
        total = int(rng.integers(1, 300))
        errors = int(rng.integers(0, 3))
        rows.append({schema.PART: f"part-{index}.parquet" if index % 7 else "", schema.ROWS: total,
                     schema.ROWS_OK: total - errors, schema.ROWS_ERROR: errors,
                     schema.AUDIO_S: float(rng.uniform(1, 100)), schema.PADDED_S: float(rng.uniform(100, 120)),
                     schema.COMMITTED_AT: 1000.0 + float(rng.uniform(0, 50)),
                     **{name: float(rng.uniform(0, 2)) for name in schema.BUSY_S_BY_STAGE.values()}})
    return rows


def test_totals_part_by_part_are_the_sums_over_the_parts():
    parts = summary_rows(500)
    totals = RunTotals(started_at=990.0)
    for part in parts:
        totals.add(part)
    summary = totals.summary()
    assert summary["rows"] == sum(p[schema.ROWS] for p in parts)
    assert summary["rows_ok"] == sum(p[schema.ROWS_OK] for p in parts)
    assert summary["rows_error"] == sum(p[schema.ROWS_ERROR] for p in parts)
    assert summary["parts"] == sum(1 for p in parts if p[schema.PART])  # a batch of no rows commits no part
    assert summary["audio_hours"] == pytest.approx(sum(p[schema.AUDIO_S] for p in parts) / 3600)
    assert summary["padding_efficiency"] == pytest.approx(
        sum(p[schema.AUDIO_S] for p in parts) / sum(p[schema.PADDED_S] for p in parts))
    assert summary["first_part_s"] == pytest.approx(min(p[schema.COMMITTED_AT] for p in parts) - 990.0)
    assert summary["last_commit_at"] == max(p[schema.COMMITTED_AT] for p in parts)
    for stage, name in schema.BUSY_S_BY_STAGE.items():
        assert summary["busy_s"][stage] == pytest.approx(sum(p[name] for p in parts))
    again = summarize(parts, 990.0)
    assert {k: v for k, v in again.items() if k not in ("wall_s", "rtfx")} == \
        {k: v for k, v in summary.items() if k not in ("wall_s", "rtfx")}


def test_no_part_gives_empty_totals():
    summary = RunTotals(started_at=time.time()).summary()
    assert (summary["rows"], summary["parts"], summary["first_part_s"], summary["last_commit_at"]) == (0, 0, None, None)
    assert summary["padding_efficiency"] is None


def test_a_summary_at_every_part_of_twenty_thousand_stays_linear():
    # 20,000 parts (5 million rows of 256): summing every part again at each would take minutes
    parts = summary_rows(20_000, seed=1)
    totals = RunTotals(started_at=990.0)
    started = time.perf_counter()
    for part in parts:
        totals.add(part)
        summary = totals.summary()
    assert time.perf_counter() - started < 3.0
    assert summary["rows"] == sum(p[schema.ROWS] for p in parts)
