"""How long exporting an output takes, per format, and the export's peak memory: a synthetic output of `--rows` rows
(12 words each, 2 s, recordings of `--segments` rows each), written with the real commit protocol, exported by
`pipeline/exports/export.py` to a local folder.

    python benchmarks/exports.py --rows 20000
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._timing import interleaved_ms, machine  # noqa: E402
from pipeline import schema  # noqa: E402
from pipeline.exports import FORMATS, ExportConfig, export_output  # noqa: E402
from pipeline.io import sink  # noqa: E402

WORDS = "the of and a to in is you that it he was for on are as with his they i at be this have from".split()


def synthetic_output(folder: Path, rows: int, segments: int, part_rows: int = 4096) -> str:
    generator = random.Random(0)
    output = str(folder)
    for first in range(0, rows, part_rows):
        columns: dict[str, list] = {name: [] for name in schema.OUTPUT_SCHEMA.names}
        for index in range(first, min(rows, first + part_rows)):
            words = [generator.choice(WORDS) for _ in range(12)]
            values = {schema.UTTERANCE_ID: f"{index:012x}", schema.MANIFEST: "/data/m.json", schema.LINE: index + 1,
                      schema.AUDIO_FILEPATH: f"/data/audio/{index // segments:07d}.flac",
                      schema.OFFSET: 2.0 * (index % segments), schema.DURATION: 2.0, schema.AUDIO_DURATION: 2.0,
                      schema.REFERENCE_TEXT: " ".join(words), schema.EXTRA: "{}", schema.TEXT: " ".join(words),
                      schema.WORDS: [{"word": w, "start": 0.15 * i, "end": 0.15 * i + 0.12, "confidence": 0.9}
                                     for i, w in enumerate(words)],
                      schema.STATUS: schema.STATUS_OK, schema.ERROR: ""}
            for name in columns:
                columns[name].append(values.get(name))
        sink.write_part(output, sink.to_output_table(columns))
    sink.mark_success(output, {})
    return output


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--segments", type=int, default=10, help="rows per recording")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="exports-bench-"))
    try:
        output = synthetic_output(root / "out", args.rows, args.segments)
        runs = {name: (lambda name=name: export_output(output, ExportConfig(formats=(name,), to=str(root / name))))
                for name in FORMATS}
        times, _ = interleaved_ms(runs, args.repeats)
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    finally:
        shutil.rmtree(root, ignore_errors=True)
    recordings = -(-args.rows // args.segments)
    print(f"{args.rows} rows, {recordings} recordings; median of {args.repeats} after a warm-up")
    print("| format | s | rows/s |")
    print("| --- | --- | --- |")
    result = {}
    for name, values in times.items():
        median_s = sorted(values)[len(values) // 2] / 1000
        result[name] = round(median_s, 3)
        print(f"| {name} | {median_s:.2f} | {args.rows / median_s:,.0f} |")
    print(f"peak memory of the process: {peak_mib:.0f} MiB")
    print("command: python benchmarks/exports.py " + " ".join(sys.argv[1:]))
    print(json.dumps({"benchmark": "exports", "rows": args.rows, "recordings": recordings, "seconds": result,
                      "peak_mib": round(peak_mib), **machine()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
