"""Loose files against shards on an object store: requests made and the audio stage's throughput (issue 34).

The same `--utterances` short utterances (FLAC, synthesized) in an S3 bucket served by moto on 127.0.0.1, every
request answered `--latency-ms` late (a WSGI layer in front of moto sleeps, then passes it on, and counts it by
method), as a real object store's time to first byte would: once as loose files under one NeMo manifest, and once
as `--shards` shards of each sharded format (a NeMo tarred set, a Lhotse Shar, WebDataset tars). For each, the
audio stage runs in this process on every row, one stage instance as one audio actor would, and the benchmark
counts the requests the server answered and times the stage: utterances per second, and the ratios against the
loose files (the issue's goals: the sharded run makes at most 1/50 of the loose run's requests, and its audio stage
is at least 5x faster).

The loose run is `LoadAudio` (`pipeline/stages/audio.py`) on the manifest's rows in tables of 16, as the job's
reading stage hands them on. The sharded formats are read by the sharded reading stage (`pipeline/stages/shards.py`)
where this tree has it; without it, the table says so and only the loose run is measured.

    python benchmarks/shards.py --quick      # 200 utterances, 4 shards
    python benchmarks/shards.py              # 2,000 utterances, 16 shards per format

The last line of output is one JSON object with every figure. Figures: docs/benchmarks.md, "Loose files against
shards".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import tarfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BUCKET = "bench"
SAMPLE_RATE = 16_000
STAGE_ROWS = 16  # rows per audio-stage call (`LoadAudio.BATCH_ROWS`)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 utterances in 4 shards")
    parser.add_argument("--utterances", type=int, default=2_000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=30.0, help="added to every request the server answers")
    args = parser.parse_args(argv)
    if args.quick:
        args.utterances, args.shards = 200, 4
    return args


# --- a slow, counting S3 -----------------------------------------------------------------------------------------
class RequestLog:
    """Requests the server answered, by method, and the latency it adds to each (changeable while it serves)."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def wrap(self, app: Callable) -> Callable:
        def slow_app(environ: dict, start_response: Callable) -> Any:
            with self._lock:
                self.counts[environ.get("REQUEST_METHOD", "?")] += 1
            if self.latency_s:
                time.sleep(self.latency_s)
            return app(environ, start_response)

        return slow_app

    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()


@contextlib.contextmanager
def slow_s3(requests: RequestLog) -> Iterator[str]:
    """moto's S3 on 127.0.0.1 behind `requests`, the AWS variables set as `tests/support/s3_server.py` sets them;
    yields the endpoint URL."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    from tests.support.s3_server import moto_s3

    class SlowServer(ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = requests.wrap(DomainDispatcherApplication(create_backend_app))
            self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
            self._server_ready_event.set()
            self._server.serve_forever()

    with moto_s3(BUCKET, server_class=SlowServer) as endpoint:
        yield endpoint


# --- the corpus ---------------------------------------------------------------------------------------------------
def utterances(count: int, folder: Path) -> list[tuple[str, bytes, float, str]]:
    """`count` utterances as (name, FLAC bytes, duration s, text): the synthesized sentences, each copy its own noise,
    so that every utterance is its own content."""
    import numpy as np
    import soundfile

    from tests.support import random_nemo

    files = random_nemo.synthesize(folder / "sentences", random_nemo.SENTENCES)
    waves = [soundfile.read(f, dtype="float32")[0] for f in files]
    rng = np.random.default_rng(0)
    made = []
    for index in range(count):
        wave = waves[index % len(waves)]
        noisy = np.clip(wave + 0.001 * rng.standard_normal(len(wave)).astype(np.float32), -1, 1)
        buffer = io.BytesIO()
        soundfile.write(buffer, noisy, SAMPLE_RATE, format="FLAC")
        made.append((f"utt-{index:05d}", buffer.getvalue(), len(wave) / SAMPLE_RATE,
                     random_nemo.SENTENCES[index % len(waves)]))
    return made


def put_loose(corpus: list[tuple[str, bytes, float, str]]) -> str:
    """Each utterance as its own object, and a NeMo manifest listing them; returns the manifest's URI."""
    import s3fs

    filesystem = s3fs.S3FileSystem()
    lines = []
    for name, flac, duration_s, text in corpus:
        uri = f"s3://{BUCKET}/loose/{name}.flac"
        filesystem.pipe(uri, flac)
        lines.append(json.dumps({"audio_filepath": uri, "duration": duration_s, "text": text}))
    manifest = f"s3://{BUCKET}/loose/manifest.json"
    filesystem.pipe(manifest, ("\n".join(lines) + "\n").encode())
    return manifest


def tar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def put_nemo_tarred(corpus: list[tuple[str, bytes, float, str]], shards: int) -> dict[str, str]:
    """A NeMo tarred set as NeMo's conversion lays it out: `audio_{i}.tar`, `tarred_audio_manifest.json` (each line
    the original keys, `audio_filepath` the member's name, and `shard_id`)."""
    import s3fs

    filesystem = s3fs.S3FileSystem()
    root = f"s3://{BUCKET}/nemo"
    lines = []
    for shard in range(shards):
        members = [(f"{name}.flac", flac) for name, flac, _, _ in corpus[shard::shards]]
        filesystem.pipe(f"{root}/audio_{shard}.tar", tar_bytes(members))
        lines += [json.dumps({"audio_filepath": f"{name}.flac", "duration": duration_s, "text": text,
                              "shard_id": shard}) for name, _, duration_s, text in corpus[shard::shards]]
    filesystem.pipe(f"{root}/tarred_audio_manifest.json", ("\n".join(lines) + "\n").encode())
    return {"manifest": f"{root}/tarred_audio_manifest.json",
            "tarred_audio": f"{root}/audio_{{0..{shards - 1}}}.tar"}


def put_webdataset(corpus: list[tuple[str, bytes, float, str]], shards: int) -> dict[str, str]:
    """WebDataset tars: `{key}.flac` beside `{key}.json`."""
    import s3fs

    filesystem = s3fs.S3FileSystem()
    root = f"s3://{BUCKET}/wds"
    for shard in range(shards):
        members = []
        for name, flac, _, text in corpus[shard::shards]:
            members += [(f"{name}.flac", flac), (f"{name}.json", json.dumps({"text": text}).encode())]
        filesystem.pipe(f"{root}/shard-{shard:06d}.tar", tar_bytes(members))
    return {"manifest": f"{root}/shard-{{000000..{shards - 1:06d}}}.tar"}


def put_shar(corpus: list[tuple[str, bytes, float, str]], shards: int, folder: Path) -> dict[str, str]:
    """A Lhotse Shar written by lhotse's `SharWriter` (FLAC), uploaded."""
    import s3fs
    from lhotse import CutSet, MonoCut, Recording, SupervisionSegment
    from lhotse.shar import SharWriter

    local = folder / "shar"
    local.mkdir(parents=True, exist_ok=True)
    per_shard = -(-len(corpus) // shards)
    cuts = []
    for name, flac, _, text in corpus:
        path = folder / "flac" / f"{name}.flac"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(flac)
        recording = Recording.from_file(path, recording_id=name)
        cuts.append(MonoCut(id=name, start=0.0, duration=recording.duration, channel=0, recording=recording,
                            supervisions=[SupervisionSegment(id=name, recording_id=name, start=0.0,
                                                             duration=recording.duration, text=text)]))
    with SharWriter(str(local), fields={"recording": "flac"}, shard_size=per_shard) as writer:
        for cut in CutSet.from_cuts(cuts):
            writer.write(cut)
    filesystem = s3fs.S3FileSystem()
    root = f"s3://{BUCKET}/shar"
    for path in sorted(local.iterdir()):
        filesystem.put_file(str(path), f"{root}/{path.name}")
    return {"manifest": root}


# --- the audio stage on each ---------------------------------------------------------------------------------------
def loose_stage(manifest: str) -> Callable[[], int]:
    """`LoadAudio` on every row of `manifest`, 16 rows a call; returns the rows decoded ok."""
    import pyarrow as pa

    from pipeline import schema
    from pipeline.io import read_manifest
    from pipeline.stages import LoadAudio

    def run() -> int:
        stage = LoadAudio(SAMPLE_RATE)
        rows = list(read_manifest(manifest))
        ok = 0
        for start in range(0, len(rows), STAGE_ROWS):
            table = stage(pa.Table.from_pylist(rows[start:start + STAGE_ROWS], schema=schema.INPUT_SCHEMA))
            ok += sum(status == schema.STATUS_OK for status in table.column(schema.STATUS).to_pylist())
        return ok

    return run


def sharded_stage(layout: dict[str, str]) -> Callable[[], int] | None:
    """The sharded reading stages on every row of `layout`: `ReadShards` turns each listing into a task per shard
    and `LoadShards` reads each shard once, as the job's audio actors do (None where this tree has no such stage)."""
    try:
        from pipeline.stages.shards import LoadShards
    except ImportError:
        return None
    from pipeline import schema
    from pipeline.io import IdSet
    from pipeline.io.shards import sharded_corpus
    from pipeline.stages.read import ReadShards

    tarred_audio = (layout["tarred_audio"],) if "tarred_audio" in layout else ()

    def run() -> int:
        listings = sharded_corpus((layout["manifest"],), tarred_audio) or []
        reader, stage = ReadShards(IdSet()), LoadShards(SAMPLE_RATE)
        ok = 0
        for listing in listings:
            for task in reader.tasks(listing):
                for table in stage(task):
                    ok += sum(status == schema.STATUS_OK for status in table.column(schema.STATUS).to_pylist())
        return ok

    return run


def measure(requests: RequestLog, run: Callable[[], int]) -> dict[str, Any]:
    requests.reset()
    started = time.perf_counter()
    ok = run()
    seconds = time.perf_counter() - started
    return {"rows_ok": ok, "seconds": seconds, "utterances_per_s": ok / seconds if seconds > 0 else None,
            "requests": requests.total(), "requests_by_method": dict(requests.counts)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import tempfile

    args = parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
    requests = RequestLog(latency_s=0.0)  # no latency while the corpus is uploaded
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, slow_s3(requests) as endpoint:
        corpus = utterances(args.utterances, Path(tmp))
        audio_s = sum(duration for _, _, duration, _ in corpus)
        layouts = {"loose files": {"manifest": put_loose(corpus)},
                   "NeMo tarred": put_nemo_tarred(corpus, args.shards),
                   "WebDataset": put_webdataset(corpus, args.shards),
                   "Lhotse Shar": put_shar(corpus, args.shards, Path(tmp))}
        requests.latency_s = args.latency_ms / 1000
        for name, layout in layouts.items():
            run = loose_stage(layout["manifest"]) if name == "loose files" else sharded_stage(layout)
            results[name] = measure(requests, run) if run is not None else {"missing": "pipeline/stages/shards.py"}
    loose = results["loose files"]
    print(f"# benchmarks/shards.py: {args.utterances:,} utterances ({audio_s / 60:.1f} min of FLAC), "
          f"{args.shards} shards per format, moto S3 at {endpoint} with {args.latency_ms:g} ms per request, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print("\n| layout | requests | requests vs loose | audio stage s | utterances/s | speed vs loose |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, figures in results.items():
        if "missing" in figures:
            print(f"| {name} | not measured: {figures['missing']} is not in this tree | | | | |")
            continue
        print(f"| {name} | {figures['requests']:,} | {figures['requests'] / loose['requests']:.4f} | "
              f"{figures['seconds']:.1f} | {figures['utterances_per_s']:.1f} | "
              f"{loose['seconds'] / figures['seconds']:.2f}x |")
    command = "python benchmarks/shards.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"\nreproduce: {command.strip()}")
    figures = {"benchmark": "shards", "command": command.strip(), "utterances": args.utterances,
               "shards": args.shards, "latency_ms": args.latency_ms, "audio_s": audio_s, "cpus": os.cpu_count(),
               "results": results}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
