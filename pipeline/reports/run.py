"""The report of a transcription run: `OUTPUT/_report.md` with its PNGs, and the same figures in `_summary.json`
(under `report`), written when the run has marked its output complete (`write_run_report`, called by
`pipeline/graph.py::run_transcription`). Files beside the Parquet parts start with "_", as the others there do, so
Parquet readers skip them.

- **Throughput** (`_report_throughput.png`): the audio committed against the run's wall time, one point per part this
  run committed (its `committed_at`).
- **Where the time went** (`_report_stages.png`): the seconds each stage's workers spent on this run's rows (reading,
  audio, encoder, decoding, writing: the parts' busy seconds, `schema.BUSY_S_BY_STAGE`), and the share of its workers'
  time that kept busy (busy seconds over the run's wall time times the stage's workers: at most 1). The busiest
  stage is the one the others wait for; the run's wall time includes starting Ray's actors and loading the model,
  so on a short run every share is low.
- **Error rows by cause**, every error row of the output (earlier runs' included), grouped as
  `jobs/inspect_output.py` groups them (`pipeline/reports/inspection.py::error_cause`: where and which file left out),
  with examples.
- **WER and CER** where the manifests give reference text (`text`: `schema.REFERENCE_TEXT`): of every ok row of the
  output with one, overall and per manifest, normalised and as written (`pipeline/reports/scoring.py`), and the
  utterances with the most word errors (normalised). Error rows have no transcript and are left out (counted).

The figures are counted in Arrow where a corpus of a million rows would make Python loops slow, but for the texts
scored (jiwer compares strings) and the error rows' causes.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline import schema
from pipeline.config import TranscribeJobConfig
from pipeline.io import sink
from pipeline.io.folder import Folder
from pipeline.reports.inspection import error_cause

log = logging.getLogger(__name__)

REPORT_FILE = "_report.md"
THROUGHPUT_PNG = "_report_throughput.png"
STAGES_PNG = "_report_stages.png"
SHOWN_CAUSES = 20  # causes in the report (all are in `_summary.json`)
CAUSE_EXAMPLES = 3  # error rows shown per cause
WORST_UTTERANCES = 10
SHOWN_MANIFESTS = 20  # manifests in the report's table (the worst by WER where there are more; all in the summary)
THROUGHPUT_POINTS = 200  # points of the throughput curve kept in `_summary.json`
EXAMPLE_CHARS = 240  # an example or a text in the report is cut here


def write_run_report(config: TranscribeJobConfig, summary: dict[str, Any], parts: list[dict[str, Any]],
                     started_at: float) -> dict[str, Any]:
    """Write the run's report and add its figures to `_summary.json`; returns `summary` with them (key `report`).

    `parts`: the summary rows of the parts this run committed (`FinishAndWrite`'s); `started_at`: the Unix time the
    run started. A report that cannot be written is said in one line and leaves the summary as it was: the
    transcripts are committed and marked complete before this runs."""
    # matplotlib's notes (a font cache being built, a temporary config folder) are no user's to act on
    matplotlib_log = logging.getLogger("matplotlib")
    level = matplotlib_log.level
    matplotlib_log.setLevel(logging.ERROR)
    try:
        report = run_figures(config, summary, parts, started_at)
        folder = Folder(config.output)
        folder.write(THROUGHPUT_PNG, throughput_png(report["throughput"]))
        folder.write(STAGES_PNG, stages_png(report["stages"]))
        folder.write(REPORT_FILE, report_markdown(summary, report))
        with_report = {**summary, "report": report}
        rewrite_summary(config.output, with_report)
        summary = with_report
    except Exception as error:  # the job's results stand; only their report is missing
        log.warning("loopscribe: the run report could not be written (%s: %s)", type(error).__name__, error)
    finally:
        matplotlib_log.setLevel(level)
    return summary


def run_figures(config: TranscribeJobConfig, summary: dict[str, Any], parts: list[dict[str, Any]],
                started_at: float) -> dict[str, Any]:
    """Everything the report shows, as `_summary.json`'s `report` holds it."""
    table = sink.read_output(config.output, columns=[schema.UTTERANCE_ID, schema.MANIFEST, schema.LINE, schema.STATUS,
                                                     schema.ERROR, schema.REFERENCE_TEXT, schema.TEXT])
    wall_s = summary["this_run"]["wall_s"]
    return {"file": Folder(config.output).uri_of(REPORT_FILE),
            "throughput": throughput(parts, started_at),
            "stages": stage_times(parts, wall_s, stage_workers(config)),
            "errors_by_cause": errors_by_cause(table),
            "scores": scores(table)}


def throughput(parts: list[dict[str, Any]], started_at: float) -> list[dict[str, float]]:
    """Seconds since the run started, audio seconds and rows committed by then, at each part (at most
    `THROUGHPUT_POINTS`, evenly spread, the last kept)."""
    points, audio_s, rows = [], 0.0, 0
    for part in sorted(parts, key=lambda p: p[schema.COMMITTED_AT]):
        audio_s += part[schema.AUDIO_S]
        rows += part[schema.ROWS]
        points.append({"wall_s": part[schema.COMMITTED_AT] - started_at, "audio_s": audio_s, "rows": rows})
    if len(points) > THROUGHPUT_POINTS:
        step = len(points) / THROUGHPUT_POINTS
        points = [points[int(i * step)] for i in range(THROUGHPUT_POINTS - 1)] + [points[-1]]
    return points


def stage_workers(config: TranscribeJobConfig) -> dict[str, int]:
    """How many workers each stage ran: the job's actors; manifests are read by at most `ReadManifests.MAX_TASKS`
    tasks at once, one per manifest (`_config.json` lists the run's manifests)."""
    from pipeline.stages.read import ReadManifests

    listed = json.loads(Folder(config.output).read(sink.CONFIG_FILE) or "{}").get("manifests") or []
    resources = config.resources
    return {"reading": max(1, min(ReadManifests.MAX_TASKS, len(listed) or ReadManifests.MAX_TASKS)),
            "audio": resources.audio_actors, "encoder": resources.asr_actors, "decoding": resources.asr_actors,
            "writing": resources.writer_actors}


def stage_times(parts: list[dict[str, Any]], wall_s: float, workers: dict[str, int]) -> dict[str, dict[str, float]]:
    """Per stage: busy seconds on this run's rows, its workers, and the share of their time (over `wall_s`) busy."""
    stages = {}
    for stage, column in schema.BUSY_S_BY_STAGE.items():
        busy_s = sum(part.get(column) or 0.0 for part in parts)
        stages[stage] = {"busy_s": busy_s, "workers": workers[stage],
                         "busy_share": busy_s / (wall_s * workers[stage]) if wall_s > 0 else 0.0}
    return stages


def errors_by_cause(table: pa.Table) -> list[dict[str, Any]]:
    """The output's error rows grouped by cause (`error_cause`), the most frequent first, each with its first
    `CAUSE_EXAMPLES` rows (in manifest and line order) as their `error` says them."""
    errors = table.filter(pc.fill_null(pc.not_equal(table.column(schema.STATUS), schema.STATUS_OK), True))
    errors = errors.sort_by([(schema.MANIFEST, "ascending"), (schema.LINE, "ascending")])
    causes: dict[str, dict[str, Any]] = {}
    for error in errors.column(schema.ERROR).to_pylist():
        entry = causes.setdefault(error_cause(error), {"rows": 0, "examples": []})
        entry["rows"] += 1
        if len(entry["examples"]) < CAUSE_EXAMPLES:
            entry["examples"].append(error or "")
    return [{"cause": cause, **entry} for cause, entry in sorted(causes.items(), key=lambda c: (-c[1]["rows"], c[0]))]


def scores(table: pa.Table) -> dict[str, Any] | None:
    """WER and CER of the ok rows with a reference text, overall and per manifest, and the worst utterances; None
    where no row has a reference text."""
    from pipeline.lm.text import plain_text
    from pipeline.reports.scoring import NORMALISED, WRITTEN, error_rates

    has_reference = pc.fill_null(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(
        table.column(schema.REFERENCE_TEXT))), 0), False)
    ok = pc.fill_null(pc.equal(table.column(schema.STATUS), schema.STATUS_OK), False)
    scored = table.filter(pc.and_(has_reference, ok)).sort_by([(schema.MANIFEST, "ascending"),
                                                              (schema.LINE, "ascending")])
    if not scored.num_rows:
        return None
    references = scored.column(schema.REFERENCE_TEXT).to_pylist()
    texts = [text or "" for text in scored.column(schema.TEXT).to_pylist()]
    manifests = scored.column(schema.MANIFEST).to_pylist()
    overall = error_rates(references, texts)
    by_manifest = []
    starts = [0] + [i for i in range(1, len(manifests)) if manifests[i] != manifests[i - 1]] + [len(manifests)]
    for start, end in zip(starts, starts[1:]):  # the rows are in manifest order
        rates = overall if end - start == len(manifests) else error_rates(references[start:end], texts[start:end])
        by_manifest.append({"manifest": manifests[start], "utterances": end - start, **rates_of(rates)})
    lines, ids = scored.column(schema.LINE).to_pylist(), scored.column(schema.UTTERANCE_ID).to_pylist()
    worst = sorted((i for i, errors in enumerate(overall.errors) if errors), key=lambda i: -overall.errors[i])
    return {"utterances": scored.num_rows, **rates_of(overall),
            "error_rows_with_reference": pc.sum(pc.and_(has_reference, pc.invert(ok))).as_py() or 0,
            "normalised": NORMALISED, "written": WRITTEN,
            "by_manifest": by_manifest,
            "worst": [{"manifest": manifests[i], "line": lines[i], "utterance_id": ids[i],
                       "word_errors": overall.errors[i], "reference_words": len(plain_text(references[i]).split()),
                       "reference": references[i], "text": texts[i]} for i in worst[:WORST_UTTERANCES]]}


def rates_of(rates: Any) -> dict[str, float]:
    return {"wer": rates.wer, "cer": rates.cer, "written_wer": rates.written_wer, "written_cer": rates.written_cer}


def throughput_png(points: list[dict[str, float]]) -> bytes:
    from pipeline.reports.plots import new_plot, png

    figure, axes = new_plot()
    wall_unit, wall_scale = time_unit(max((p["wall_s"] for p in points), default=0.0))
    audio_unit, audio_scale = time_unit(max((p["audio_s"] for p in points), default=0.0))
    if points:
        axes.step([0.0] + [p["wall_s"] / wall_scale for p in points],
                  [0.0] + [p["audio_s"] / audio_scale for p in points], where="post", marker=".",
                  label="audio committed")
        last = points[-1]
        if last["wall_s"] > 0:
            axes.plot([0.0, last["wall_s"] / wall_scale], [0.0, last["audio_s"] / audio_scale], linestyle="--",
                      color="gray", label=f"mean: {last['audio_s'] / last['wall_s']:.1f}x real time")
    else:
        axes.plot([], [], label="nothing committed in this run")
    return png(figure, axes, f"wall time since the run started ({wall_unit})", f"audio committed ({audio_unit})",
               "Throughput")


def stages_png(stages: dict[str, dict[str, float]]) -> bytes:
    from pipeline.reports.plots import new_plot, png

    figure, axes = new_plot()
    names = list(stages)
    unit, scale = time_unit(max((s["busy_s"] for s in stages.values()), default=0.0))
    bars = axes.barh(names, [stages[name]["busy_s"] / scale for name in names], label="busy seconds of the workers")
    axes.bar_label(bars, labels=[f"{stages[name]['busy_share']:.0%} of {workers_text(stages[name]['workers'])}' time"
                                 for name in names], padding=3, fontsize=8)
    axes.invert_yaxis()  # the pipeline's order, top to bottom
    axes.margins(x=0.35)
    return png(figure, axes, f"busy time ({unit})", "stage", "Where the time went")


def workers_text(workers: int) -> str:
    return "1 worker" if workers == 1 else f"{workers} workers"


def seconds_text(seconds: float) -> str:
    """12 s, 3.4 s, 0.052 s: three figures at most, whole seconds from 100 on."""
    return f"{seconds:.0f} s" if seconds >= 100 else f"{seconds:.3g} s"


def time_unit(seconds: float) -> tuple[str, float]:
    """The unit a duration up to `seconds` reads best in, and its seconds."""
    if seconds >= 3 * 3600:
        return "h", 3600.0
    if seconds >= 3 * 60:
        return "min", 60.0
    return "s", 1.0


def report_markdown(summary: dict[str, Any], report: dict[str, Any]) -> str:
    this_run = summary["this_run"]
    rtfx = f", {this_run['rtfx']:.1f}x real time" if this_run.get("rtfx") else ""
    lines = ["# Transcription run", "",
             f"Model `{summary.get('model_id')}`, decoding `{summary.get('decoding')}`, on {summary.get('device')}.",
             "",
             f"This run committed {this_run['rows']} rows ({this_run['rows_error']} error rows) in {this_run['parts']} "
             f"parts, {this_run['audio_hours'] * 3600:.1f} s of audio in {this_run['wall_s']:.1f} s{rtfx}. The output "
             f"holds {summary['rows']} rows: {summary['rows_ok']} ok, {summary['rows_error']} error rows.", "",
             "## Throughput", "", f"![audio committed against wall time]({THROUGHPUT_PNG})", ""]
    points = report["throughput"]
    if points:
        steady = ""
        if len(points) > 1 and points[-1]["wall_s"] > points[0]["wall_s"]:
            rate = (points[-1]["audio_s"] - points[0]["audio_s"]) / (points[-1]["wall_s"] - points[0]["wall_s"])
            steady = f"; from the first part to the last, {rate:.1f}x real time"
        lines += [f"The first part was committed {points[0]['wall_s']:.1f} s after the run started (starting Ray's "
                  f"actors and loading the model){steady}.", ""]
    lines += ["## Where the time went", "",
              "Seconds each stage's workers spent on this run's rows, and the share of their time that kept busy (busy "
              "seconds over the run's wall time times the workers). The busiest stage is the one the others wait "
              "for.", "", "| stage | busy | workers | busy share |", "| --- | --- | --- | --- |"]
    lines += [f"| {stage} | {seconds_text(times['busy_s'])} | {times['workers']} | {times['busy_share']:.0%} |"
              for stage, times in report["stages"].items()]
    lines += ["", f"![busy seconds by stage]({STAGES_PNG})", "", "## Error rows by cause", ""]
    causes = report["errors_by_cause"]
    if causes:
        lines += [f"{sum(c['rows'] for c in causes)} error rows in the output, by cause (where and which file left "
                  "out; `python jobs/inspect_output.py` groups them the same way):", "",
                  "| cause | rows | examples |", "| --- | --- | --- |"]
        lines += [f"| {cell(cause['cause'])} | {cause['rows']} | "
                  f"{'<br>'.join(cell(example) for example in cause['examples'])} |" for cause in causes[:SHOWN_CAUSES]]
        if len(causes) > SHOWN_CAUSES:
            lines += ["", f"... and {len(causes) - SHOWN_CAUSES} more causes (`_summary.json`, `report`)."]
    else:
        lines += ["No error rows."]
    lines += ["", "## WER and CER", ""] + scores_markdown(report["scores"])
    return "\n".join(lines) + "\n"


def scores_markdown(scored: dict[str, Any] | None) -> list[str]:
    from pipeline.reports.scoring import rates_text

    if scored is None:
        return ["No row has a reference text (`text` in the manifest): nothing to score."]
    lines = [f"Against the manifests' reference texts, {scored['utterances']} ok rows; normalised first, as written in "
             f"brackets ({scored['normalised']}; {scored['written']}).", "",
             f"**Overall: WER {rates_text(scored)}, CER {rates_text(scored, 'CER')}.**", ""]
    if scored["error_rows_with_reference"]:
        lines += [f"{scored['error_rows_with_reference']} error rows with a reference text are left out (no "
                  "transcript).", ""]
    by_manifest = scored["by_manifest"]
    shown = sorted(by_manifest, key=lambda m: -m["wer"])[:SHOWN_MANIFESTS] if len(by_manifest) > SHOWN_MANIFESTS \
        else by_manifest
    if len(by_manifest) > SHOWN_MANIFESTS:
        lines += [f"The {SHOWN_MANIFESTS} manifests of the highest WER of {len(by_manifest)} (all in `_summary.json`):",
                  ""]
    lines += ["| manifest | utterances | WER | CER |", "| --- | --- | --- | --- |"]
    lines += [f"| {cell(m['manifest'])} | {m['utterances']} | {rates_text(m)} | {rates_text(m, 'CER')} |"
              for m in shown]
    lines += ["", "The utterances with the most word errors (normalised):", ""]
    if scored["worst"]:
        lines += ["| manifest, line | word errors | reference | transcript |", "| --- | --- | --- | --- |"]
        lines += [f"| {cell(w['manifest'])}, line {w['line']} | {w['word_errors']} of {w['reference_words']} | "
                  f"{cell(w['reference'])} | {cell(w['text'])} |" for w in scored["worst"]]
    else:
        lines += ["None: every transcript matches its reference."]
    return lines


def cell(text: str | None) -> str:
    """`text` fit for a Markdown table cell: one line, pipes escaped, cut at `EXAMPLE_CHARS`."""
    text = " ".join((text or "").split())
    if len(text) > EXAMPLE_CHARS:
        text = text[:EXAMPLE_CHARS - 3] + "..."
    return text.replace("|", "\\|")


def rewrite_summary(output_uri: str, summary: dict[str, Any]) -> None:
    """`_summary.json` again, with the report's figures, replaced whole: on a local disk written beside it and
    renamed over it (a reader sees the old summary or the new one), on an object store one PUT."""
    filesystem, root = sink.output_filesystem(output_uri)
    if not sink.is_local_filesystem(filesystem):
        sink.write_json(output_uri, sink.SUMMARY_FILE, summary)
        return
    staging = f"{sink.SUMMARY_FILE}.writing"
    sink.write_json(output_uri, staging, summary)
    filesystem.mv(f"{root.rstrip('/')}/{staging}", f"{root.rstrip('/')}/{sink.SUMMARY_FILE}")
