"""Nightly pseudo-labelling: new audio in, transcripts with confidence, filters, training manifests out.

    python jobs/pseudo_label.py --audio 's3://bucket/incoming/**/*.flac' --output s3://bucket/labels
    python jobs/pseudo_label.py --manifest new.json --output out/labels --min-confidence 0.7
    python jobs/pseudo_label.py --manifest calls.json --output s3://bucket/labels --output-format nemo_tarred shar

Each run:
1. lists its input: `--manifest` files (as `jobs/transcribe.py` reads them) and `--audio` files or globs (each
   file one utterance, its duration read from the header, its id made of URI, size and modification time or
   ETag, so that a rewritten file is labelled again);
2. transcribes what no earlier run into the same `--output` transcribed with the same model and decoding, with
   word confidence, into OUTPUT/<model and decoding>/transcripts/ (exactly once, as `jobs/transcribe.py`
   writes it; a new model or decoding gets its own folder, beside the old labels);
3. cuts every transcript longer than `--max-segment-s` (20 s) between its words into segments of at most that
   length, at the widest pauses (or in non-speech, where the row has a VAD's speech spans:
   `pipeline/labels/segments.py`), and judges every transcript or segment that no earlier run put in a manifest
   (`pipeline/labels/filters.py`: error rows, empty text, duration, confidence, characters per second, repeated
   n-grams), writing in OUTPUT/<model and decoding>/runs/<UTC time>/:
   - with `--output-format nemo` (the default): `train.json` (NeMo JSON-lines: audio_filepath, duration, offset
     (a segment's: into the original audio), text = the pseudo-label, confidence, orig_text) and
     `train_cuts.jsonl.gz` (Lhotse cuts) of the kept utterances; `--cut-audio` writes each kept segment as its own
     FLAC in audio/ instead of an offset;
   - with `nemo_tarred`: nemo_tarred/, a NeMo tarred audio dataset as NeMo's conversion script writes it; with
     `shar`: shar/, a Lhotse Shar (`pipeline/labels/shards_out.py`): each kept utterance's audio copied once, in
     shards of at most `--shard-utterances`;
   - `rejected.json`, each line with its `reason`;
   - `report.md`, `report.json` and `confidence.png` (keep rate, and where the input had reference texts the
     WER of kept and rejected utterances, against the confidence threshold);
   - `errors.txt`: the ids of the utterances whose audio it could not read (in `rejected.json` with their error);
     every later run transcribes them again (`--retry-errors`), and one that now reads is labelled by that run,
     while one that still fails is counted in the report (`still_unreadable`), not listed again;
   - `labelled.txt`, written last: the utterance ids this run labelled. A run folder without it did not finish
     and is removed by the next run, whose manifests then hold its utterances: each utterance is in exactly
     one run's `train.json` or filter rejections, and an unreadable one in one run's `rejected.json` until it
     reads.

The run is `pipeline/labels/runs.py`'s; its report, `pipeline/reports/pseudo_label.py`.

Ray: RAY_ADDRESS or --ray-address, else a private local Ray; on a cluster `ray job submit -- python
jobs/pseudo_label.py ...` with an object-store `--output`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.io.redact import redact  # noqa: E402
from pipeline.labels import LabelConfig, LabelError, label_run, prepare_label_run, print_line  # noqa: E402
from pipeline.preflight import PreflightError  # noqa: E402
from pipeline.reports.pseudo_label import report_markdown  # noqa: E402
from pipeline.settings import from_args, parser_for  # noqa: E402


def parser() -> argparse.ArgumentParser:
    """Every setting of a run (`LabelConfig`, declared once; the shared ones as `jobs/transcribe.py` has them)."""
    return parser_for(LabelConfig, __doc__)


def config_from_args(args: argparse.Namespace) -> LabelConfig:
    try:
        return from_args(LabelConfig, args)
    except ValueError as error:
        raise LabelError(str(error)) from None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args)
    except (LabelError, PreflightError) as error:
        raise SystemExit(f"pseudo_label: {redact(str(error))}") from None


def run(args: argparse.Namespace) -> int:
    started = time.time()
    config = config_from_args(args)
    inputs = prepare_label_run(config)  # before any cluster work
    finished = label_run(config, inputs, started)
    print(report_markdown(finished.report), flush=True)
    print_line(f"{finished.report['kept']} kept, {finished.report['rejected']} rejected -> "
               f"{redact(finished.folder.uri)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
