"""What an output folder holds and how far its job got, read from the files the commit protocol leaves
(`pipeline/io/sink.py`, `pipeline/io/claim.py`): for `jobs/inspect_output.py`.

- whether the job finished: `_SUCCESS` (written last) is there, or not (running, or stopped: the time since the
  last part was committed tells which is likely; nothing in the folder says for sure);
- the rows committed: ok and error, the error rows grouped by cause (`error_cause`) with an example each, the audio;
- the model (URI, sha256 of its content, the `model` column's id) and the decoding (`_config.json`: the strategy,
  every setting not at its default, and the `decoding` column's description);
- progress: the rows committed against the rows of the manifests the last run read (`_config.json` lists them; each
  non-blank line is a row, counted without parsing, as `ReadManifests` makes one row of it), within its `--limit`;
- what to run next: the job's command rebuilt from `_config.json` (every setting not at its default, as its flag;
  `--output` the folder inspected), which finishes an unfinished output, and with `--retry-errors` transcribes the
  error rows again. URIs in it are as `_config.json` holds them: without their credentials (`***`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import shlex
import time
from typing import Any

import pyarrow.compute as pc

from pipeline import schema
from pipeline.io import sink
from pipeline.io.claim import CLAIM_FILE, read_identity
from pipeline.io.manifest_file import LIMIT_REACHED, Broken, manifest_lines

SHOWN_CAUSES = 8
RECENT_COMMIT_S = 600.0  # a part committed more recently than this: the job may still be running
JOB_COMMAND = ("python", "jobs/transcribe.py")
ALWAYS_GIVEN = ("manifests", "output", "model.uri")  # named in the command even at their defaults
NEVER_GIVEN = ("dry_run",)
_WHERE = re.compile(r"^.*?, line \d+: ")  # "<manifest>, line <n>: " before every error row's cause
_DETAIL = re.compile(r"\s*\(.*$")  # a cause's details in brackets: (byte 0xff at column 17), (OSError: ...)
_NUMBER = re.compile(r"(?<![\w-])-?\d+(\.\d+)?(?![\w-])")  # a number of its own (signed): not UTF-8's, not in a name


class InspectError(ValueError):
    """Not an output loopscribe wrote: the message says what was found."""


def error_cause(error: str) -> str:
    """An error row's `error` -> its kind, for counting: without where (manifest, line), the audio file named
    first, details in brackets, and numbers (`... line 3: /a/x.wav: not decodable audio (...)` -> "not decodable
    audio"; `... offset 12.5 s is past the end` -> "offset N s is past the end")."""
    cause = _WHERE.sub("", error or "", count=1)
    head, separator, rest = cause.partition(": ")
    if separator and " " not in head and ("/" in head or "." in head):  # the audio file's name
        cause = rest
    cause = _DETAIL.sub("", cause).strip()
    return _NUMBER.sub("N", cause) or "(no cause recorded)"


def manifest_rows(uri: str) -> int | None:
    """The rows a manifest makes: its non-blank lines, plus one for a part that cannot be read (an error row);
    None where it cannot be opened now."""
    rows = 0
    for item in manifest_lines(uri):
        if item is LIMIT_REACHED:
            break
        if isinstance(item, Broken):
            if item.what == "open":
                return None
            rows += 1
            break
        _, line = item
        rows += bool(line.strip())
    return rows


def committed_rows(output_uri: str) -> dict[str, Any]:
    """The rows in every part now (a running job's included): counts, errors by cause, audio seconds."""
    table = sink.read_output(output_uri, columns=[schema.UTTERANCE_ID, schema.MANIFEST, schema.LINE, schema.STATUS,
                                                  schema.ERROR, schema.AUDIO_DURATION], every_part=True)
    ok = pc.fill_null(pc.equal(table.column(schema.STATUS), schema.STATUS_OK), False)
    errors = table.filter(pc.invert(ok))
    causes: dict[str, list[Any]] = {}
    for error in errors.column(schema.ERROR).to_pylist():
        entry = causes.setdefault(error_cause(error), [0, error])
        entry[0] += 1
    listings = pc.binary_join_element_wise(
        table.column(schema.UTTERANCE_ID), pc.fill_null(table.column(schema.MANIFEST), ""),
        pc.fill_null(pc.cast(table.column(schema.LINE), "string"), ""), "\x00")
    return {"rows": table.num_rows, "rows_ok": pc.sum(ok).as_py() or 0, "rows_error": errors.num_rows,
            "utterances": pc.count_distinct(table.column(schema.UTTERANCE_ID)).as_py(),
            "manifest_lines_done": pc.count_distinct(listings).as_py(),
            "audio_s": pc.sum(table.column(schema.AUDIO_DURATION)).as_py() or 0.0,
            "errors_by_cause": [{"cause": cause, "rows": count, "example": example} for cause, (count, example) in
                                sorted(causes.items(), key=lambda item: (-item[1][0], item[0]))]}


def last_commit(output_uri: str) -> float | None:
    """Unix time of the newest part's modification, from one listing; None where the store gives no time."""
    filesystem, root = sink.output_filesystem(output_uri)
    filesystem.invalidate_cache(root)
    try:
        entries = filesystem.ls(root, detail=True)
    except FileNotFoundError:
        return None
    times = []
    for entry in entries:
        if not entry["name"].rsplit("/", 1)[-1].startswith(sink.PART_PREFIX):
            continue
        modified = entry.get("mtime", entry.get("LastModified", entry.get("updated")))
        if isinstance(modified, datetime.datetime):
            modified = modified.timestamp()
        elif isinstance(modified, str):
            try:
                modified = datetime.datetime.fromisoformat(modified.replace("Z", "+00:00")).timestamp()
            except ValueError:
                modified = None
        if isinstance(modified, (int, float)):
            times.append(float(modified))
    return max(times, default=None)


def setting_values(config_class: type, config: dict[str, Any]) -> list[tuple[str, Any, Any, list[str]]]:
    """(dotted key, value in `config`, its default, the flag's spelling) of every setting of `config_class`, in
    declaration order; a key `config` lacks (an older loopscribe) has the default as its value."""
    from pipeline.settings import declared, flag_of

    defaults = json.loads(json.dumps(config_class().to_dict()))
    values = []
    for key, field, declaration, _ in declared(config_class):
        default, value = lookup(defaults, key), lookup(config, key, lookup(defaults, key))
        values.append((key, value, default, flag_of(field, declaration)))
    return values


def lookup(values: dict[str, Any], dotted: str, missing: Any = None) -> Any:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return missing
        node = node[part]
    return node


def job_command(config: dict[str, Any]) -> list[str]:
    """The transcription command that makes (and finishes) an output of `config` (`_config.json`'s "config"):
    every setting not at its default, and the manifests, output and model always."""
    from pipeline.config import TranscribeJobConfig

    command = list(JOB_COMMAND)
    for key, value, default, flag in setting_values(TranscribeJobConfig, config):
        if key in NEVER_GIVEN or value is None or (value == default and key not in ALWAYS_GIVEN):
            continue
        if isinstance(value, bool):
            command.append(flag)  # a boolean flag flips its default
        elif isinstance(value, list):
            if value:
                command += [flag, *map(str, value)]
        else:
            command += [flag, str(value)]
    return command


def decoding_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The decoding settings of `config` not at their defaults (the strategy always)."""
    from pipeline.decoding import DecodingConfig

    defaults = dataclasses.asdict(DecodingConfig())
    decoding = config.get("decoding") or {}
    return {key: value for key, value in decoding.items()
            if key == "strategy" or key in defaults and json.dumps(value) != json.dumps(defaults[key])}


def decoding_description(config: dict[str, Any]) -> str | None:
    """What the `decoding` column calls this decoding (`pipeline/decoding/plan.py::describe`); None where this
    loopscribe cannot read the settings (another version's)."""
    from pipeline.decoding import DecodingConfig, describe

    try:
        return describe(DecodingConfig(**(config.get("decoding") or {})))
    except (TypeError, ValueError, KeyError):
        return None


def read_json(output_uri: str, name: str) -> dict[str, Any] | None:
    filesystem, root = sink.output_filesystem(output_uri)
    path = f"{root.rstrip('/')}/{name}"
    filesystem.invalidate_cache(path)
    try:
        with filesystem.open(path, "r") as handle:
            value = json.load(handle)
    except (FileNotFoundError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def inspect_output(output_uri: str, count_manifests: bool = True, now: float | None = None) -> dict[str, Any]:
    """What `output_uri` holds and how far its job got (module docstring), as plain data; `InspectError` where it
    is not a loopscribe output."""
    claim = read_identity(output_uri)
    parts = sink.list_parts(output_uri)
    if claim is None and not parts:
        raise InspectError(f"no loopscribe output at {output_uri}: no {CLAIM_FILE}, {sink.CONFIG_FILE} or parts")
    written = read_json(output_uri, sink.CONFIG_FILE) or {}
    config = written.get("config") or {}
    complete = sink.is_complete(output_uri)
    summary = read_json(output_uri, sink.SUMMARY_FILE) if complete else None
    rows = committed_rows(output_uri)
    newest = last_commit(output_uri)
    now = time.time() if now is None else now
    report: dict[str, Any] = {
        "output": output_uri, "complete": complete, "parts": len(parts),
        "claimed": (claim or {}).get("claimed"),
        "last_commit_s_ago": None if newest is None else max(0.0, now - newest),
        "model": {"uri": lookup(config, "model.uri"), "sha256": written.get("model_sha256"),
                  "id": written.get("model_id")},
        "decoding": {"settings": decoding_settings(config) if config else {},
                     "description": (summary or {}).get("decoding") or (decoding_description(config) if config
                                                                         else None)},
        "device": written.get("device"), **rows,
        "manifests": written.get("manifests") or config.get("manifests") or [],
        "limit": config.get("limit"), "manifest_rows": None,
        "summary": summary,
        # into the folder inspected, wherever the job first wrote (a copied or moved output)
        "command": shlex.join(job_command({**config, "output": output_uri})) if config else None,
    }
    if count_manifests and report["manifests"] and not complete:
        counts = [manifest_rows(uri) for uri in report["manifests"]]
        if all(count is not None for count in counts):
            total = sum(counts)
            report["manifest_rows"] = total if report["limit"] is None else min(total, report["limit"])
    return report


def inspection_lines(report: dict[str, Any]) -> list[str]:
    """The report for a person, one line each (the first says whether the job finished)."""
    lines = []
    done = report["manifest_lines_done"]
    if report["complete"]:
        lines.append(f"{report['output']}: complete ({report['parts']} parts)")
    else:
        ago = report["last_commit_s_ago"]
        when = "" if ago is None else f"; the last part was committed {shown_time(ago)} ago"
        state = ("running, or stopped" if ago is not None and ago < RECENT_COMMIT_S else "stopped, or running slowly")
        lines.append(f"{report['output']}: not finished (no {sink.SUCCESS_FILE}): its job is {state}{when}")
        total = report["manifest_rows"]
        of = f" of {total:,} manifest rows ({done / total:.0%})" if total else ""
        lines.append(f"progress: {done:,} rows committed{of} in {report['parts']} parts")
    lines.append(f"rows: {report['rows']:,} ({report['rows_ok']:,} ok, {report['rows_error']:,} error), "
                 f"{report['utterances']:,} utterances, {report['audio_s'] / 3600:.2f} h of audio")
    for entry in report["errors_by_cause"][:SHOWN_CAUSES]:
        lines.append(f"  errors: {entry['rows']:,} x {entry['cause']} (e.g. {entry['example']})")
    hidden = len(report["errors_by_cause"]) - SHOWN_CAUSES
    if hidden > 0:
        lines.append(f"  errors: ... and {hidden} more causes")
    model = report["model"]
    if model["uri"]:
        lines.append(f"model: {model['uri']} (sha256 {model['sha256'] or 'unknown'})")
    decoding = report["decoding"]
    if decoding["settings"]:
        others = ", ".join(f"{key}={value}" for key, value in decoding["settings"].items() if key != "strategy")
        lines.append(f"decoding: {decoding['description'] or decoding['settings']['strategy']}"
                     + (f" (settings not at their defaults: {others})" if others else ""))
    if report["manifests"]:
        lines.append(f"manifests: {', '.join(report['manifests'])}"
                     + (f" (--limit {report['limit']})" if report["limit"] else ""))
    if report["summary"]:
        from pipeline.reports.summary import findings

        try:
            lines += [f"note: {finding}" for finding in findings(report["summary"])]
        except KeyError:  # a summary of another version
            pass
    command = report["command"]
    if command is None:
        lines.append(f"no {sink.CONFIG_FILE}: the job stopped before it started transcribing; run its command again")
    elif not report["complete"]:
        lines.append(f"to finish it (once its job is no longer running): {command}")
    elif report["rows_error"]:
        lines.append(f"to transcribe the {report['rows_error']:,} error rows again once their cause is fixed: "
                     f"{command}{'' if '--retry-errors' in command else ' --retry-errors'}")
    else:
        lines.append(f"nothing left to do; it was made by: {command}")
    return lines


def shown_time(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
