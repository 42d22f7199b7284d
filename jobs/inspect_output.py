"""What a transcription output holds and how far its job got, and the command that finishes it.

    python jobs/inspect_output.py transcripts
    python jobs/inspect_output.py s3://bucket/transcripts --json

Says whether the job finished (`_SUCCESS`), the rows committed (ok, error rows by cause), the model and decoding
(`_config.json`), for an unfinished output the rows committed against the manifests' rows and how long ago the last
part was committed, and the `jobs/transcribe.py` command that finishes it (`pipeline/reports/inspection.py`). It
only reads. (Not `jobs/inspect.py`: a script's folder comes first on `sys.path`, and a module named `inspect` there
would stand in for the standard library's in every job.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.io.redact import redact, secrets_in  # noqa: E402
from pipeline.reports.inspection import InspectError, inspect_output, inspection_lines  # noqa: E402


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/inspect_output.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output", metavar="OUTPUT", help="the transcription output (folder or URI)")
    p.add_argument("--json", action="store_true", help="print everything found as one JSON object")
    p.add_argument("--no-manifest-count", dest="count_manifests", action="store_false",
                   help="do not read the manifests to count their rows (an unfinished output's progress)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    secrets = secrets_in(args.output)
    try:
        report = inspect_output(args.output, count_manifests=args.count_manifests)
    except (InspectError, FileNotFoundError) as error:
        raise SystemExit(redact(f"loopscribe: {error}", secrets)) from None
    if args.json:
        print(redact(json.dumps(report, indent=2, sort_keys=True), secrets))
    else:
        for line in inspection_lines(report):
            print(redact(line, secrets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
