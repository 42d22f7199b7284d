"""A running job's figures as Ray metrics (`ray.util.metrics`), for Ray's dashboard and any Prometheus scraping it.

The writer actors count each part when they commit it (`FinishAndWrite`, `PartMetrics.count_part`): its rows, error
rows, audio seconds, and the seconds each stage's workers spent on its rows (the part's summary row, `schema.
BUSY_S_BY_STAGE`). Every series is tagged with the job's output (its URI without credentials), so that jobs sharing a
cluster are told apart; the busy seconds also with the stage. Ray exports them from each node's metrics agent, named
with its `ray_` prefix and, for a counter, Prometheus's `_total` suffix: `loopscribe_rows` is scraped as
`ray_loopscribe_rows_total` (docs/monitoring.md lists them, with queries).

A stage called outside Ray (a test, `decode_in_process`) counts nothing: the counters are made on the first part
counted in a Ray worker, and never where Ray is not initialised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline import schema
from pipeline.io.redact import redact

OUTPUT_TAG = "output"  # every metric's: the job's output URI, credentials taken out
STAGE_TAG = "stage"  # the busy seconds': a key of schema.BUSY_S_BY_STAGE (reading, audio, encoder, decoding, writing)


@dataclass(frozen=True)
class Metric:
    name: str  # as made in Ray; scraped as f"ray_{name}_total"
    description: str
    tags: tuple[str, ...] = (OUTPUT_TAG,)


PARTS = Metric("loopscribe_parts", "Parquet parts committed")
ROWS = Metric("loopscribe_rows", "rows committed, ok and error rows")
ERROR_ROWS = Metric("loopscribe_error_rows", "error rows committed (status error: the row's error says why)")
AUDIO_SECONDS = Metric("loopscribe_audio_seconds", "seconds of audio decoded in the rows committed")
BUSY_SECONDS = Metric("loopscribe_busy_seconds", "seconds a stage's workers spent on the rows committed (reading, "
                                                 "audio, encoder, decoding, writing; model loading left out)",
                      (OUTPUT_TAG, STAGE_TAG))
METRICS = (PARTS, ROWS, ERROR_ROWS, AUDIO_SECONDS, BUSY_SECONDS)


def exported_name(metric: Metric) -> str:
    """The name a Prometheus scrape of Ray's metrics agent gives `metric`: Ray's prefix, a counter's suffix."""
    return f"ray_{metric.name}_total"


class PartMetrics:
    """The counters of one job's committed parts, in one writer actor (`count_part` after each commit)."""

    def __init__(self, output: str) -> None:
        self.output = redact(output)
        self._counters: dict[str, Any] | None = None

    def count_part(self, part: dict[str, Any]) -> None:
        """Count one part's summary row (`FinishAndWrite`'s: rows, rows_error, audio_s and the busy seconds)."""
        counters = self._made()
        if counters is None:
            return
        tags = {OUTPUT_TAG: self.output}
        counters[PARTS.name].inc(1.0, tags=tags)
        for metric, value in ((ROWS, part[schema.ROWS]), (ERROR_ROWS, part[schema.ROWS_ERROR]),
                              (AUDIO_SECONDS, part[schema.AUDIO_S])):
            if value:  # Ray refuses an increment of 0
                counters[metric.name].inc(float(value), tags=tags)
        for stage, column in schema.BUSY_S_BY_STAGE.items():
            if part.get(column):
                counters[BUSY_SECONDS.name].inc(float(part[column]), tags={**tags, STAGE_TAG: stage})

    def _made(self) -> dict[str, Any] | None:
        if self._counters is None:
            import ray

            if not ray.is_initialized():
                return None
            from ray.util.metrics import Counter

            self._counters = {metric.name: Counter(metric.name, description=metric.description, tag_keys=metric.tags)
                              for metric in METRICS}
        return self._counters
