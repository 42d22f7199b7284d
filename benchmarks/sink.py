"""Reading back a job's output on S3: the resume scan, the final dedupe and the status totals, by threads.

A job's driver reads one column of every committed part when it starts (`committed_ids`, to skip finished rows)
and again when it ends (`deduplicate`, then the status totals); that is one request per part, and a large job
has thousands of parts. This writes `--parts` parts of 16 rows to an S3 bucket served by moto on 127.0.0.1 and
times the three scans with `sink.READ_THREADS` at 1, 4 and 16, in interleaved rounds: as moto serves them
(on this machine the moto server's own CPU time is what each request costs), and with a simulated latency of
`--latency-ms` added to every part opened (a sleep before `open` returns), as a real object store's
time to first byte (tens of milliseconds) would add.

It also runs `deduplicate` alone on a local output of `--dedupe-rows` rows (parts of 1,000 rows, ids of 32 hex
digits like `manifest.utterance_identity`'s), each run in its own subprocess: once with no duplicates (the usual
case) and once with a few thousand (error rows a `--retry-errors` rerun transcribed again, a re-batched part, a
part listing ids twice). It reports the wall time, the growth of the process's peak resident memory, the peak of
Python's allocations (tracemalloc, in a run of its own, as tracing slows allocation) and of Arrow's memory pool.

    python benchmarks/sink.py            # 400 parts
    python benchmarks/sink.py --quick    # 60 parts, about a minute

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeline import schema  # noqa: E402
from pipeline.io import sink

THREADS = (1, 4, 16)
ROWS_PER_PART = 16
DEDUPE_PART_ROWS = 1000


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="60 parts and 1 round")
    parser.add_argument("--parts", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=30.0, help="simulated latency per part opened")
    parser.add_argument("--dedupe-rows", type=int, default=1_000_000, help="rows of the output deduplicated")
    parser.add_argument("--dedupe-run", nargs=2, metavar=("OUTPUT", "TRACE"), help=argparse.SUPPRESS)
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


def write_rows(output: str, ids: list[str], ok: list[bool]) -> None:
    sink.write_part(output, sink.to_output_table({
        schema.UTTERANCE_ID: ids, schema.TEXT: ["some words here" if o else None for o in ok],
        schema.STATUS: [schema.STATUS_OK if o else schema.STATUS_ERROR for o in ok],
        schema.ERROR: [None if o else "m.json, line 1: cannot read the audio" for o in ok]}))


def write_dedupe_outputs(folder: Path, rows: int) -> dict[str, str]:
    """Two outputs of `rows` rows: one without duplicates, and the same with a few thousand duplicate rows."""
    hex_digits = np.random.default_rng(0).bytes(16 * rows).hex()
    ids = [hex_digits[32 * i:32 * (i + 1)] for i in range(rows)]
    error = set(range(0, 20 * DEDUPE_PART_ROWS, 10)) & set(range(rows))  # every 10th row of the first 20 parts
    unique, duplicated = str(folder / "unique"), str(folder / "duplicated")
    for start in range(0, rows, DEDUPE_PART_ROWS):
        span = range(start, min(start + DEDUPE_PART_ROWS, rows))
        for output in (unique, duplicated):
            write_rows(output, [ids[i] for i in span], [i not in error for i in span])
    retried = sorted(error)  # a --retry-errors rerun: the error rows' ok rows
    for start in range(0, len(retried), DEDUPE_PART_ROWS):
        chunk = retried[start:start + DEDUPE_PART_ROWS]
        write_rows(duplicated, [ids[i] for i in chunk], [True] * len(chunk))
    middle = rows // 2  # a re-batched retry: the second half of one part and the first half of the next
    span = range(middle + DEDUPE_PART_ROWS // 2, min(middle + 3 * DEDUPE_PART_ROWS // 2, rows))
    write_rows(duplicated, [ids[i] for i in span], [True] * len(span))
    twice = [f"listed-twice-{i:04d}" for i in range(DEDUPE_PART_ROWS // 2)]  # a manifest listing its lines twice
    write_rows(duplicated, twice + twice, [True] * len(twice) * 2)
    return {"no duplicates": unique, "duplicates": duplicated}


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not carried over from the parent by exec)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def dedupe_run(output: str, trace: bool) -> None:
    """One `deduplicate` in this fresh process; prints its figures as a JSON line."""
    with tempfile.TemporaryDirectory() as warmup:  # what the first call imports and starts is not counted
        write_rows(warmup, ["a", "a"], [True, True])
        sink.deduplicate(warmup)
    peak_before_mb = peak_rss_mb()
    if trace:
        tracemalloc.start()
    start = time.perf_counter()
    result = sink.deduplicate(output)
    seconds = time.perf_counter() - start
    figures = {"seconds": seconds, "removed": result.duplicates + result.errors_replaced,
               "errors_replaced": result.errors_replaced,
               "rss_growth_mb": peak_rss_mb() - peak_before_mb,
               "arrow_peak_mb": pa.default_memory_pool().max_memory() / 2**20}
    if trace:
        figures["python_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
    print(json.dumps(figures))


def measure_dedupe(rows: int, repeats: int) -> dict[str, dict[str, float]]:
    """Median figures of `deduplicate` on each output, each run on a fresh copy in a fresh process."""
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        outputs = write_dedupe_outputs(Path(folder), rows)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in outputs}
        for _ in range(repeats):
            for name, output in outputs.items():
                for trace in (False, True):
                    copy = f"{folder}/copy"
                    shutil.copytree(output, copy)
                    run = subprocess.run([sys.executable, __file__, "--dedupe-run", copy, str(int(trace))],
                                         capture_output=True, text=True, timeout=3600)
                    shutil.rmtree(copy)
                    if run.returncode:
                        raise RuntimeError(run.stderr[-2000:])
                    runs[name].append(json.loads(run.stdout.strip().splitlines()[-1]))
        for name, measured in runs.items():
            untraced = [m for m in measured if "python_peak_mb" not in m]
            traced = [m for m in measured if "python_peak_mb" in m]
            figures[name] = {"parts": len(sink.list_parts(outputs[name])), "removed": untraced[0]["removed"],
                             "errors_replaced": untraced[0]["errors_replaced"],
                             **{key: round(statistics.median(m[key] for m in untraced), 3)
                                for key in ("seconds", "rss_growth_mb", "arrow_peak_mb")},
                             "python_peak_mb": round(statistics.median(m["python_peak_mb"] for m in traced), 3)}
    return figures


def main() -> None:
    args = parse_args()
    if args.dedupe_run:
        dedupe_run(args.dedupe_run[0], args.dedupe_run[1] == "1")
        return
    # imported only here: torch (benchmarks._timing) and moto would set the peak memory a --dedupe-run measures
    from benchmarks._timing import interleaved_ms, machine
    from tests.support.s3_server import moto_s3
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
                saved = sink.READ_THREADS, sink.output_filesystem
                sink.READ_THREADS = threads
                if latency_s:
                    def slow_filesystem(uri: str):
                        filesystem, root = saved[1](uri)
                        return _Slow(filesystem, latency_s), root
                    sink.output_filesystem = slow_filesystem
                try:
                    scans(output)
                finally:
                    sink.READ_THREADS, sink.output_filesystem = saved
            return run

        runs = {(latency, threads): with_threads(threads, latency / 1000)
                for latency in (0.0, args.latency_ms) for threads in THREADS}
        times, _ = interleaved_ms(runs, args.repeats)
    dedupe = measure_dedupe(args.dedupe_rows, args.repeats)
    median = {key: statistics.median(values) for key, values in times.items()}
    print(f"# benchmarks/sink.py: {args.parts} parts of {ROWS_PER_PART} rows on moto S3 ({endpoint}), "
          f"median of {args.repeats} interleaved rounds")
    print("| added latency per part | threads | resume scan + dedupe + totals, s | ms per part | speed vs 1 thread |")
    print("| --- | --- | --- | --- | --- |")
    for latency, threads in runs:
        figure = median[(latency, threads)]
        print(f"| {latency:.0f} ms | {threads} | {figure / 1000:.2f} | {figure / args.parts:.2f} | "
              f"{median[(latency, 1)] / figure:.2f} |")
    print(f"\n# deduplicate alone on a local output of {args.dedupe_rows:,} rows, a fresh process per run, "
          f"median of {args.repeats}")
    print("| output | parts | rows removed (errors replaced) | s | peak RSS growth, MB | Python peak (tracemalloc), MB "
          "| Arrow pool peak, MB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, figures in dedupe.items():
        print(f"| {name} | {figures['parts']} | {figures['removed']} ({figures['errors_replaced']}) | "
              f"{figures['seconds']:.2f} | {figures['rss_growth_mb']:.0f} | {figures['python_peak_mb']:.1f} | "
              f"{figures['arrow_peak_mb']:.0f} |")
    command = "python benchmarks/sink.py " + " ".join(sys.argv[1:])
    print(f"reproduce: {command.strip()}")
    print(json.dumps({"benchmark": "sink", "command": command.strip(), **machine("cpu"), "parts": args.parts,
                      "rows_per_part": ROWS_PER_PART, "repeats": args.repeats,
                      "seconds": {f"{lat:.0f}ms/{t}": round(median[(lat, t)] / 1000, 3) for lat, t in runs},
                      "speed_vs_1_thread": {f"{lat:.0f}ms/{t}": round(median[(lat, 1)] / median[(lat, t)], 2)
                                            for lat, t in runs},
                      "dedupe_rows": args.dedupe_rows, "dedupe": dedupe}))


if __name__ == "__main__":
    main()
