"""What bad input costs the Ray job: a clean manifest against a hostile one of the same length, side by side.

The hostile manifest (`tests/support/hostile_corpus.py`) has one bad line in five, of 20 kinds: malformed,
truncated, non-UTF-8 and NUL-byte lines, wrong types, null and missing keys, non-finite and huge numbers, and
missing, corrupt, header-only, empty, directory, FIFO, lying-header (1 Hz), NaN-sample and absurd-frame-count
audio. The clean one has good lines only. Both go through `run_transcription` on one in-process Ray, into fresh
outputs; the figures are rows out (must equal lines in), error rows, wall time, and the peak resident memory
of this process and every process it started (Ray's GCS, raylet and workers; shared pages counted per
process, so an upper bound). A row decoding a lying header would alone take 1.7 GB.

    python benchmarks/bad_input.py --quick    # 1,000 lines each, about a minute on a 2-core CPU
    python benchmarks/bad_input.py            # 10,000 lines each

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._timing import machine  # noqa: E402
from pipeline import schema  # noqa: E402
from pipeline.config import BUNDLED_MODEL, ModelConfig, ResourcesConfig, TranscribeJobConfig  # noqa: E402
from pipeline.io import sink
from tests.support.hostile_corpus import PeakRss, write_hostile_corpus  # noqa: E402

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 lines per manifest")
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--cpus", type=int, default=3, help="logical CPUs of the local Ray")
    args = parser.parse_args()
    if args.quick:
        args.lines = 1_000
    return args


def clean_manifest(folder: Path, lines: int, audio_files: list[Path]) -> Path:
    manifest = folder / "clean.json"
    with open(manifest, "w") as handle:
        for index in range(lines):
            handle.write(json.dumps({"id": f"utt-{index}", "audio_filepath": str(audio_files[index % len(audio_files)]),
                                     "duration": 0.4, "offset": 0.01 * (index % 50)}) + "\n")
    return manifest


def run(manifest: Path, output: Path, cache_dir: Path) -> dict:
    from pipeline.graph import run_transcription

    config = TranscribeJobConfig(
        manifests=(str(manifest),), output=str(output),
        model=ModelConfig(uri=str(BUNDLED_MODEL), cache_dir=str(cache_dir)),
        resources=ResourcesConfig(device="cpu", asr_actors=1, audio_actors=2, writer_actors=1, window_rows=512,
                                  part_rows=1000, batch_audio_s=60.0, torch_threads=1))
    memory = PeakRss()
    started = time.monotonic()
    try:
        summary = run_transcription(config, progress=lambda _: None)
    finally:
        memory.stop()
    table = sink.read_output(str(output), columns=[schema.UTTERANCE_ID])
    return {"rows": table.num_rows, "distinct_ids": len(set(table.column(0).to_pylist())),
            "rows_ok": summary["rows_ok"], "rows_error": summary["rows_error"],
            "wall_s": round(time.monotonic() - started, 2), "peak_rss_gib": round(memory.peak_bytes / 2**30, 2)}


def main() -> None:
    args = parse_args()
    import ray

    audio_files = sorted(SAMPLES.glob("sample*.flac"))
    work = Path(tempfile.mkdtemp(prefix="lsbad"))
    try:
        hostile = write_hostile_corpus(work / "hostile", args.lines, audio_files)
        manifests = {"clean": clean_manifest(work, args.lines, audio_files), "hostile": hostile.manifest}
        ray.init(num_cpus=args.cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                 _temp_dir=str(work / "ray"), logging_level="WARNING", log_to_driver=False)
        from ray.data import DataContext

        DataContext.get_current().enable_progress_bars = False
        logging.getLogger("ray").setLevel(logging.ERROR)
        results = {name: run(manifest, work / f"out-{name}", work / "cache") for name, manifest in manifests.items()}
        ray.shutdown()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"# benchmarks/bad_input.py: {args.lines} lines per manifest, the bundled model, in-process Ray with "
          f"{args.cpus} CPUs")
    print("| manifest | lines in | rows out | distinct ids | ok | error | wall s | wall vs clean | peak RSS GiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, figures in results.items():
        print(f"| {name} | {args.lines} | {figures['rows']} | {figures['distinct_ids']} | {figures['rows_ok']} | "
              f"{figures['rows_error']} | {figures['wall_s']:.1f} | "
              f"{figures['wall_s'] / results['clean']['wall_s']:.2f} | {figures['peak_rss_gib']:.2f} |")
    command = "python benchmarks/bad_input.py " + " ".join(sys.argv[1:])
    print(f"reproduce: {command.strip()}")
    print(json.dumps({"benchmark": "bad_input", "command": command.strip(), **machine("cpu"), "lines": args.lines,
                      "expected_error_rows": len(hostile.bad), **results}))


if __name__ == "__main__":
    main()
