"""Transcribe NeMo or Lhotse manifests into Parquet with word timestamps, on a Ray cluster or this machine.

    python jobs/transcribe.py                                  # the bundled samples, with the bundled model
    python jobs/transcribe.py --manifest s3://bucket/manifests/*.json --output s3://bucket/transcripts \\
        --model s3://bucket/models/asr.nemo --decoding alsd --beam-size 4 --lm s3://bucket/lm/domain.lm \\
        --lm-weight 0.3 --device cuda --asr-actors 8
    ray job submit --address http://HEAD:8265 --working-dir . -- python jobs/transcribe.py ...

A YAML file (`--config job.yaml`) may hold any setting, in the sections of `pipeline/config.py` (top level:
manifests, output, ray_address; sections model, decoding, resources); flags given on the command line override
it. Running the same command again after a crash (same --output) transcribes only the rows not yet committed.
Ctrl-C or SIGTERM stops the job within seconds (exit 130 or 143) with one line: the rows committed, and the command
that finishes the rest (`pipeline/interrupts.py`). `--dry-run` checks a job without transcribing
(`pipeline/dry_run.py`); `--limit N` transcribes the manifests' first N rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.config import TranscribeJobConfig, config_from_flags  # noqa: E402
from pipeline.decoding import advice, describe  # noqa: E402
from pipeline.interrupts import Interrupted, signals_stop_the_job, stop_on_signals, wind_down  # noqa: E402
from pipeline.io.redact import redact, secrets_in  # noqa: E402
from pipeline.preflight import PreflightError, check_transcription  # noqa: E402
from pipeline.reports import findings  # noqa: E402
from pipeline.settings import add_flags, overrides_from_args  # noqa: E402

if TYPE_CHECKING:
    from pipeline.exports import ExportConfig

Hide = Callable[[str], str]  # a text with the job's credentials taken out


def parser() -> argparse.ArgumentParser:
    """Every setting of `TranscribeJobConfig` as a flag (declared once, in `pipeline/config.py`)."""
    p = argparse.ArgumentParser(
        prog="jobs/transcribe.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file with any of the settings below; flags override it")
    add_flags(p, TranscribeJobConfig)
    p.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    return p


def config_from_args(args: argparse.Namespace) -> TranscribeJobConfig:
    try:
        return config_from_flags(args.config, overrides_from_args(args, TranscribeJobConfig))
    except (TypeError, ValueError) as error:
        raise SystemExit(f"invalid configuration: {error}") from None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    config = config_from_args(args)
    if args.print_config:
        print(json.dumps(config.to_dict(), indent=2, sort_keys=True))
        return 0
    secrets = secrets_in(dataclasses.asdict(config))

    def hide(text: str) -> str:  # what a storage library quotes of a URI's credentials, too
        return redact(text, secrets)

    # the command as given, to say how to finish what an interrupted run left
    command = hide(shlex.join(["python", sys.argv[0], *sys.argv[1:]] if argv is None
                              else ["python", "jobs/transcribe.py", *argv]))
    with signals_stop_the_job():
        try:
            return transcribe(config, hide)
        except Interrupted as interrupted:
            return stopped(interrupted, config, command, hide)


def stopped(interrupted: Interrupted, config: TranscribeJobConfig, command: str, hide: Hide) -> int:
    """The job after Ctrl-C or SIGTERM: Ray stopped, then one line saying what is committed and how to go on."""
    rest = f"the same command finishes the rest: {command}"
    wind_down(interrupted, f"loopscribe: stopped ({interrupted.name}); {rest}")
    if config.dry_run:
        print(f"loopscribe: stopped ({interrupted.name}) during the dry run; nothing was written", file=sys.stderr,
              flush=True)
        return interrupted.exit_code
    from pipeline.io import sink

    try:
        committed = f"{len(sink.committed_ids(config.output)):,} rows committed in {config.output}"
    except Exception as error:  # an output that cannot be read now (an outage) must not cost the line
        committed = f"the rows committed in {config.output} could not be counted ({type(error).__name__})"
    print(hide(f"loopscribe: stopped ({interrupted.name}): {committed}; {rest}"), file=sys.stderr, flush=True)
    return interrupted.exit_code


def transcribe(config: TranscribeJobConfig, hide: Hide) -> int:
    exports = export_config(config)
    try:
        check_transcription(config)
    except PreflightError as error:
        raise SystemExit(f"loopscribe: {error}") from None
    from pipeline.graph import JobError, connect_ray, expand_manifests, run_transcription, shard_listings

    try:
        manifest_uris = expand_manifests(config, warn=lambda line: print(f"loopscribe: warning: {hide(line)}",
                                                                         file=sys.stderr, flush=True))
    except (JobError, FileNotFoundError) as error:
        raise SystemExit(f"loopscribe: {hide(str(error))}") from None
    kind = "manifest(s)" if shard_listings(config) is None else "listing(s) of shards"  # looked up once, cached
    print(hide(f"loopscribe: {len(manifest_uris)} {kind} ({', '.join(config.manifests)}) -> {config.output} "
                 f"({describe(config.decoding)})"), flush=True)
    for note in advice(config.decoding):
        print(f"loopscribe: note: {note}", file=sys.stderr, flush=True)
    if config.dry_run:
        return check_only(config, manifest_uris, hide)
    connect_ray(config.ray_address)
    stop_on_signals()  # again: ray.init installs its own SIGTERM handler (a C stack dump)
    try:
        summary = run_transcription(config, manifest_uris=manifest_uris)
    except (JobError, FileNotFoundError) as error:
        raise SystemExit(f"loopscribe: {hide(str(error))}") from None
    except Exception as error:  # a bug or an outage: the whole traceback, with no credential in it
        print(hide("".join(traceback.format_exception(error))), file=sys.stderr, flush=True)
        raise SystemExit(f"loopscribe: the job failed: {hide(f'{type(error).__name__}: {error}')}") from None
    report = summary.get("report") or {}  # its figures are in _report.md and _summary.json
    print(json.dumps({key: value for key, value in summary.items() if key != "report"}, indent=2, sort_keys=True))
    for finding in findings(summary):
        print(f"loopscribe: warning: {finding}", file=sys.stderr, flush=True)
    print(hide(f"loopscribe: {summary['rows_ok']} transcripts ok, {summary['rows_error']} error rows -> "
                 f"{config.output} (Parquet; read with pandas.read_parquet({config.output!r}))"))
    if report.get("file"):
        print(hide(f"loopscribe: report: {report['file']}"), flush=True)
    if summary["rows_error"]:
        print("loopscribe: error rows stay as they are on a rerun; once their cause is fixed, the same command with "
              "--retry-errors transcribes them again", flush=True)
    if summary.get("rows_beyond_limit"):
        print(f"loopscribe: --limit {config.limit}: the manifests hold more rows; the same command with a larger "
              "--limit, or without it, transcribes them", flush=True)
    return export_after(config, exports, hide) if exports is not None else 0


def export_config(config: TranscribeJobConfig) -> ExportConfig | None:
    """--export: the export's settings, checked before the job starts (None: no export)."""
    if not config.export:
        return None
    from pipeline.exports import ExportConfig

    try:
        return ExportConfig(formats=config.export, to=config.export_to)
    except (TypeError, ValueError) as error:
        raise SystemExit(f"invalid configuration: export: {error}") from None


def export_after(config: TranscribeJobConfig, exports: ExportConfig, hide: Hide) -> int:
    """--export once the job has ended (`pipeline/exports/`); an export that fails leaves the transcripts
    committed and says how to export them again."""
    from pipeline.exports import export_lines, export_output, export_warnings

    try:
        report = export_output(config.output, exports)
    except Exception as error:  # the transcription is done: one line, not a traceback
        print(hide(f"loopscribe: the transcripts are committed, but the export failed: {error}; "
                   f"`python jobs/export.py {config.output} --format {' '.join(exports.formats)}"
                   f"{f' --to {exports.to}' if exports.to else ''}` tries again"), file=sys.stderr, flush=True)
        return 1
    for line in export_lines(report):
        print(hide(f"loopscribe: {line}"), flush=True)
    for line in export_warnings(report):
        print(hide(f"loopscribe: warning: {line}"), file=sys.stderr, flush=True)
    return 0


def check_only(config: TranscribeJobConfig, manifest_uris: list[str], hide: Hide) -> int:
    """--dry-run: the job checked without Ray (`pipeline/dry_run.py`); refused as the run would be."""
    from pipeline.dry_run import dry_run, dry_run_findings, dry_run_lines
    from pipeline.graph import JobError

    try:
        report = dry_run(config, manifest_uris)
    except (JobError, FileNotFoundError) as error:
        raise SystemExit(f"loopscribe: {hide(str(error))}") from None
    print(json.dumps(report, indent=2, sort_keys=True))
    for finding in dry_run_findings(report):
        print(hide(f"loopscribe: warning: {finding}"), file=sys.stderr, flush=True)
    for line in dry_run_lines(report, config.output):
        print(hide(f"loopscribe: {line}"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
