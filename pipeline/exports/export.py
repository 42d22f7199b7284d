"""An output exported: its transcripts as subtitles, text, a NeMo manifest and CTM, written to a folder or URI.

`export_output(output, config)` reads the committed rows once (`transcripts.py`) and writes, under `config.to`
(default `OUTPUT/_exports`: inside the output, a folder whose name starts with "_" so that Parquet readers of the
output skip it, as they skip `_SUCCESS`; a folder named `exports` there would make `pandas.read_parquet(OUTPUT)`
fail on the first subtitle file):

    <to>/srt/<recording>.srt    <to>/vtt/<recording>.vtt    <to>/txt/<recording>.txt     (one file per recording)
    <to>/nemo/transcripts.json  <to>/ctm/transcripts.ctm                                (one file for the output)
    <to>/_errors.tsv            the error rows, never exported as empty transcripts (a header only where none)

A recording with ok rows gets its files even where it holds no word (silence: an SRT without cues, an empty
text), so that a missing file always means an error row or no row. An export into a folder that holds an earlier
one writes every file again and removes none. Local folders and any fsspec URI (`s3://`, `gs://`) alike; files are
written by `WRITE_THREADS` threads at once (an object store: one PUT each).
"""

from __future__ import annotations

import csv
import io
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pipeline.exports.cues import CueRules
from pipeline.exports.formats import FORMATS, PER_RECORDING, SUFFIX, ctm_lines, nemo_line, recording_file
from pipeline.exports.transcripts import ErrorRow, ExportError, read_transcripts
from pipeline.io.folder import Folder
from pipeline.settings import check_settings, section, setting

EXPORTS_FOLDER = "_exports"
ERRORS_FILE = "_errors.tsv"
SINGLE_FILE_NAMES = {"nemo": "transcripts" + SUFFIX["nemo"], "ctm": "transcripts" + SUFFIX["ctm"]}
WRITE_THREADS = 16
PENDING_WRITES = 256  # files handed to the threads and not yet written: bounds the texts held at once
SHOWN_ERRORS = 3


@dataclass(frozen=True)
class ExportConfig:
    formats: tuple[str, ...] = setting(
        (), "formats to write: srt and vtt (subtitles), txt (one file per recording), nemo (a NeMo manifest with "
            "pred_text), ctm (NIST CTM, one file); several at once", flag="--format", choices=FORMATS, checked=False)
    to: str | None = setting(None, "folder or URI to write into, a folder per format", metavar="URI",
                             default_help=f"OUTPUT/{EXPORTS_FOLDER}")
    incomplete: bool = setting(
        False, "export an output whose job has not finished (no _SUCCESS): the rows committed so far")
    cues: CueRules = section("subtitle cues (srt, vtt)", CueRules)

    def __post_init__(self) -> None:
        check_settings(self)
        formats = (self.formats,) if isinstance(self.formats, str) else tuple(self.formats)
        if not formats:
            raise ValueError(f"give at least one format to export: {', '.join(FORMATS)}")
        unknown = [name for name in formats if name not in FORMATS]
        if unknown:
            raise ValueError(f"unknown export format {', '.join(map(repr, unknown))}: choose from {', '.join(FORMATS)}")
        object.__setattr__(self, "formats", tuple(dict.fromkeys(formats)))


@dataclass(frozen=True)
class ExportReport:
    to: str
    formats: tuple[str, ...]
    recordings: int
    rows_ok: int
    files: dict[str, str] = field(default_factory=dict)  # format -> what was written there, for a person
    errors: tuple[ErrorRow, ...] = ()
    errors_file: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"to": self.to, "formats": list(self.formats), "recordings": self.recordings, "rows_ok": self.rows_ok,
                "rows_error": len(self.errors), "files": self.files, "errors_file": self.errors_file}


def default_destination(output_uri: str) -> str:
    return f"{output_uri.rstrip('/')}/{EXPORTS_FOLDER}"


def export_output(output_uri: str, config: ExportConfig) -> ExportReport:
    """Write the output's transcripts in `config.formats` (module docstring); `ExportError` where the output cannot
    be read as one (not an output, its job unfinished) or a file cannot be written (naming it)."""
    transcripts = read_transcripts(output_uri, incomplete=config.incomplete)
    destination = Folder(config.to or default_destination(output_uri))
    folders = {name: destination.child(name) for name in config.formats}
    per_recording = [name for name in config.formats if name in PER_RECORDING]
    handles = {name: open_text(folders[name], SINGLE_FILE_NAMES[name]) for name in config.formats
               if name not in PER_RECORDING}
    recordings = 0
    try:
        with ThreadPoolExecutor(max_workers=WRITE_THREADS) as pool:
            pending: deque[Future] = deque()
            # a recording's words become Python objects only for the formats that read them
            for recording in transcripts.recordings() if per_recording or "ctm" in handles else ():
                recordings += 1
                for name in per_recording:
                    text = recording_file(recording, name, config.cues)
                    pending.append(pool.submit(written, folders[name], recording.name + SUFFIX[name], text))
                if "ctm" in handles:
                    handles["ctm"].write(ctm_lines(recording))
                while len(pending) > PENDING_WRITES:
                    pending.popleft().result()
            for future in pending:
                future.result()
        if "nemo" in handles:
            for utterance in transcripts.utterances():
                handles["nemo"].write(nemo_line(utterance))
        for name, handle in handles.items():
            handle.close()
            handles[name] = None  # closed: an object store's upload completes here
        destination.write(ERRORS_FILE, errors_tsv(transcripts.errors))
    except ExportError:
        raise
    except Exception as error:  # fsspec backends raise their own types (botocore, gcsfs ...)
        raise ExportError(f"cannot write the export to {destination.uri}: {type(error).__name__}: "
                          f"{' '.join(str(error).split())[:300]}") from error
    finally:
        for handle in handles.values():
            if handle is not None:
                handle.close()
    recordings = recordings or len(transcripts.slices)
    files = {name: (f"{folders[name].uri}/ ({recordings} files)" if name in PER_RECORDING
                    else folders[name].uri_of(SINGLE_FILE_NAMES[name])) for name in config.formats}
    return ExportReport(destination.uri, config.formats, recordings, transcripts.rows_ok, files,
                        tuple(transcripts.errors), destination.uri_of(ERRORS_FILE))


def written(folder: Folder, name: str, text: str) -> None:
    try:
        folder.write(name, text.encode("utf-8"))
    except Exception as error:
        raise ExportError(f"cannot write {folder.uri_of(name)}: {type(error).__name__}: "
                          f"{' '.join(str(error).split())[:300]}") from error


def open_text(folder: Folder, name: str) -> Any:
    """A text handle writing `name` in `folder` (an object store: one upload, complete when closed)."""
    folder.filesystem.makedirs(folder.root, exist_ok=True)
    return folder.filesystem.open(f"{folder.root}/{name}", "w", encoding="utf-8", newline="\n")


def errors_tsv(errors: list[ErrorRow] | tuple[ErrorRow, ...]) -> str:
    """The error rows as tab-separated values with a header (fields holding a tab or newline quoted, as
    `csv.excel_tab` reads them)."""
    buffer = io.StringIO()
    table = csv.writer(buffer, dialect=csv.excel_tab, lineterminator="\n")
    table.writerow(["manifest", "line", "audio_filepath", "offset", "duration", "error"])
    for row in errors:
        table.writerow([row.manifest or "", "" if row.line is None else row.line, row.audio_filepath or "",
                        "" if row.offset_s is None else f"{row.offset_s:g}",
                        "" if row.duration_s is None else f"{row.duration_s:g}", row.error])
    return buffer.getvalue()


def export_lines(report: ExportReport) -> list[str]:
    """What a person reads after an export, one line each."""
    lines = [f"exported {report.rows_ok} rows of {report.recordings} recordings as {', '.join(report.formats)} -> "
             f"{report.to}"]
    return lines + [f"  {name}: {where}" for name, where in report.files.items()]


def export_warnings(report: ExportReport) -> list[str]:
    """What of the output was not exported: the error rows, with a few of their causes."""
    if not report.errors:
        return []
    return [f"{len(report.errors)} error rows not exported (no transcript), listed in {report.errors_file}; e.g. "
            f"{'; '.join(row.error for row in report.errors[:SHOWN_ERRORS])}"]
