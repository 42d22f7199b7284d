"""The job's Ray metrics (`pipeline/metrics.py`), as Prometheus scrapes them from the node's metrics agent.

A Ray task counts two parts' summary rows, as a writer actor does when it commits them; the node's metrics endpoint
(what Prometheus and Ray's dashboard read) must then show every metric by its documented name, tagged with the output
(its credentials taken out) and, for the busy seconds, the stage. The session's Ray exports every 10 s
(`metrics_report_interval_ms`), so the scrape waits, bounded. That a real job's writers count its parts is checked
with the run report's job (tests/pipeline/reports/test_run_report.py).
"""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from pipeline import schema
from pipeline.metrics import AUDIO_SECONDS, BUSY_SECONDS, ERROR_ROWS, METRICS, PARTS, ROWS, exported_name

pytestmark = pytest.mark.ray

REPOSITORY = Path(__file__).resolve().parents[2]
SCRAPE_WAIT_S = 60.0  # the session's Ray exports every 10 s; a worker's last values when it ends
SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][\w:]*)\{(?P<labels>.*)\} (?P<value>\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metrics_endpoints() -> list[str]:
    import ray

    return [f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics" for node in ray.nodes()
            if node["Alive"]]


def scrape(names: set[str]) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample of `names` on every node's metrics endpoint now."""
    samples = []
    for url in metrics_endpoints():
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        for line in text.splitlines():
            match = SAMPLE.match(line)
            if match and match["name"] in names:
                samples.append((match["name"], dict(LABEL.findall(match["labels"])), float(match["value"])))
    return samples


def totals(output: str) -> dict[tuple[str, str | None], float]:
    """(exported name, stage or None) -> the sum over workers of the series tagged with `output`."""
    found: dict[tuple[str, str | None], float] = {}
    for name, labels, value in scrape({exported_name(metric) for metric in METRICS}):
        if labels.get("output") == output:
            key = (name, labels.get("stage"))
            found[key] = found.get(key, 0.0) + value
    return found


def wait_for_totals(output: str, done, wait_s: float = SCRAPE_WAIT_S) -> dict[tuple[str, str | None], float]:
    """`totals(output)` once `done(totals)` holds; fails after `wait_s` with the last scrape."""
    deadline = time.monotonic() + wait_s
    while True:
        found = totals(output)
        if done(found) or time.monotonic() > deadline:
            return found
        time.sleep(1.0)


PART = {schema.PART: "part-x.parquet", schema.ROWS: 16, schema.ROWS_OK: 13, schema.ROWS_ERROR: 3,
        schema.AUDIO_S: 42.5, schema.PADDED_S: 50.0, schema.READ_BUSY_S: 0.25, schema.AUDIO_BUSY_S: 1.5,
        schema.ENCODER_BUSY_S: 4.0, schema.DECODING_BUSY_S: 2.0, schema.FINISH_S: 0.5, schema.COMMITTED_AT: 0.0}


def test_a_writers_counted_parts_are_scraped_by_their_documented_names(ray_cluster):
    import ray

    output = f"s3://key:secret@bucket/metrics-test-{uuid.uuid4().hex[:8]}"

    @ray.remote(num_cpus=0)
    def count_parts(output: str) -> None:
        from pipeline.metrics import PartMetrics

        metrics = PartMetrics(output)
        metrics.count_part(PART)
        metrics.count_part({**PART, schema.ROWS_ERROR: 0, schema.DECODING_BUSY_S: 0.0})

    ray.get(count_parts.remote(output))
    shown = "s3://***@bucket/" + output.rsplit("/", 1)[-1]
    found = wait_for_totals(shown, lambda found: found.get((exported_name(PARTS), None)) == 2)
    assert found == {
        (exported_name(PARTS), None): 2, (exported_name(ROWS), None): 32, (exported_name(ERROR_ROWS), None): 3,
        (exported_name(AUDIO_SECONDS), None): 85.0, (exported_name(BUSY_SECONDS), "reading"): 0.5,
        (exported_name(BUSY_SECONDS), "audio"): 3.0, (exported_name(BUSY_SECONDS), "encoder"): 8.0,
        (exported_name(BUSY_SECONDS), "decoding"): 2.0, (exported_name(BUSY_SECONDS), "writing"): 1.0}
    assert not any("secret" in str(labels) for _, labels, _ in scrape({exported_name(m) for m in METRICS}))


def test_the_documented_metrics_are_the_ones_made():
    """docs/monitoring.md names each metric as Prometheus scrapes it, and no other loopscribe metric."""
    text = (REPOSITORY / "docs" / "monitoring.md").read_text()
    assert set(re.findall(r"`(ray_loopscribe_\w+)`", text)) == {exported_name(metric) for metric in METRICS}
