"""Export a finished transcription output as subtitles, text, a NeMo manifest or CTM (docs/exports.md).

    python jobs/export.py transcripts --format srt vtt             # -> transcripts/_exports/srt/, .../vtt/
    python jobs/export.py s3://bucket/transcripts --format nemo ctm --to s3://bucket/exports
    python jobs/export.py transcripts --format srt --max-line-chars 37 --max-cue-s 6

One file per recording (an audio file: its segments together, at their times) for srt, vtt and txt, named after the
audio file; one manifest for nemo (`pred_text`, as NeMo's transcribe_speech.py writes) and one file for ctm. Error
rows are not exported: they are listed in `_errors.tsv` beside the formats' folders and on the console.
`jobs/transcribe.py --export FORMAT` does the same when a job ends.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.exports import ExportConfig, ExportError, export_lines, export_output, export_warnings  # noqa: E402
from pipeline.io.redact import redact, secrets_in  # noqa: E402
from pipeline.settings import add_flags, from_args  # noqa: E402


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/export.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output", metavar="OUTPUT", help="the transcription output (folder or URI) to export")
    add_flags(p, ExportConfig)
    p.add_argument("--json", action="store_true", help="print what was written as one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        config = from_args(ExportConfig, args)
    except (TypeError, ValueError) as error:
        raise SystemExit(f"invalid configuration: {error}") from None
    secrets = secrets_in([args.output, config.to or ""])
    try:
        report = export_output(args.output, config)
    except (ExportError, FileNotFoundError) as error:
        raise SystemExit(redact(f"loopscribe: {error}", secrets)) from None
    if args.json:
        print(redact(json.dumps(report.to_dict(), sort_keys=True), secrets))
    for line in export_lines(report):
        print(redact(f"loopscribe: {line}", secrets), flush=True)
    for line in export_warnings(report):
        print(redact(f"loopscribe: warning: {line}", secrets), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
