"""Reading back a job's output on S3: the resume scan, the final dedupe and the status totals, by threads.

A job's driver reads one column of every committed part when it starts (`committed_ids`, to skip finished rows)
and again when it ends (`deduplicate`, then the status totals); that is one request per part, and a large job
has thousands of parts. This writes `--parts` parts of 16 rows to an S3 bucket served by moto on 127.0.0.1 and
times the three scans with `sink.READ_THREADS` at 1, 4 and 16, in interleaved rounds: as moto serves them
(on this machine the moto server's own CPU time is what each request costs), and with a simulated latency of
`--latency-ms` added to every part opened (a sleep before `open` returns), as a real object store's
time to first byte (tens of milliseconds) would add.

    python benchmarks/sink.py            # 400 parts
    python benchmarks/sink.py --quick    # 60 parts, about a minute

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._timing import interleaved_ms, machine  # noqa: E402
from pipeline import schema, sink  # noqa: E402
from tests.pipeline.s3_server import moto_s3  # noqa: E402

THREADS = (1, 4, 16)
ROWS_PER_PART = 16


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="60 parts and 1 round")
    parser.add_argument("--parts", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=30.0, help="simulated latency per part opened")
    args = parser.parse_args()
    if args.quick:
        args.parts, args.repeats = 60, 1
    return args


def scans(output: str) -> None:
    """What a job's driver reads of its output: the resume scan, the dedupe pass and the status totals."""
    sink.committed_ids(output)
    sink.deduplicate(output)
    sink.read_output(output, columns=[schema.STATUS])


class _Slow:
    """A filesystem whose `open` first waits `latency_s` (the object store's time to first byte)."""

    def __init__(self, filesystem, latency_s: float) -> None:
        self._filesystem, self._latency_s = filesystem, latency_s

    def open(self, *args, **kwargs):
        time.sleep(self._latency_s)
        return self._filesystem.open(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._filesystem, name)


def main() -> None:
    args = parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
    with moto_s3("bench") as endpoint:
        output = "s3://bench/out"
        for part in range(args.parts):
            ids = [f"utt{part:05d}-{row:02d}" for row in range(ROWS_PER_PART)]
            sink.write_part(output, sink.to_output_table({
                schema.UTTERANCE_ID: ids, schema.TEXT: ["some words here"] * len(ids),
                schema.WORDS: [[{"word": "some", "start": 0.0, "end": 0.3, "confidence": None}]] * len(ids),
                schema.STATUS: [schema.STATUS_OK] * len(ids)}))

        def with_threads(threads: int, latency_s: float):
            def run() -> None:
                saved = sink.READ_THREADS, sink._filesystem
                sink.READ_THREADS = threads
                if latency_s:
                    def slow_filesystem(uri: str):
                        filesystem, root = saved[1](uri)
                        return _Slow(filesystem, latency_s), root
                    sink._filesystem = slow_filesystem
                try:
                    scans(output)
                finally:
                    sink.READ_THREADS, sink._filesystem = saved
            return run

        runs = {(latency, threads): with_threads(threads, latency / 1000)
                for latency in (0.0, args.latency_ms) for threads in THREADS}
        times, _ = interleaved_ms(runs, args.repeats)
    median = {key: statistics.median(values) for key, values in times.items()}
    print(f"# benchmarks/sink.py: {args.parts} parts of {ROWS_PER_PART} rows on moto S3 ({endpoint}), "
          f"median of {args.repeats} interleaved rounds")
    print("| added latency per part | threads | resume scan + dedupe + totals, s | ms per part | speed vs 1 thread |")
    print("| --- | --- | --- | --- | --- |")
    for latency, threads in runs:
        figure = median[(latency, threads)]
        print(f"| {latency:.0f} ms | {threads} | {figure / 1000:.2f} | {figure / args.parts:.2f} | "
              f"{median[(latency, 1)] / figure:.2f} |")
    command = "python benchmarks/sink.py " + " ".join(sys.argv[1:])
    print(f"reproduce: {command.strip()}")
    print(json.dumps({"benchmark": "sink", "command": command.strip(), **machine("cpu"), "parts": args.parts,
                      "rows_per_part": ROWS_PER_PART, "repeats": args.repeats,
                      "seconds": {f"{lat:.0f}ms/{t}": round(median[(lat, t)] / 1000, 3) for lat, t in runs},
                      "speed_vs_1_thread": {f"{lat:.0f}ms/{t}": round(median[(lat, 1)] / median[(lat, t)], 2)
                                            for lat, t in runs}}))


if __name__ == "__main__":
    main()
