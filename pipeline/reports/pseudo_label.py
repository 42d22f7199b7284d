"""The report of a pseudo-labelling run (`jobs/pseudo_label.py`, `pipeline/labels/runs.py`): counts and reasons, the
WER and CER of all, kept and rejected utterances where the input had reference texts (normalised, and as written:
`pipeline/reports/scoring.py`), and the keep rate and normalised WER against the confidence threshold (`curve`,
`plot`). A run that keeps nothing (or has nothing new) is a report saying so."""

from __future__ import annotations

import dataclasses
from typing import Any

from pipeline import schema
from pipeline.decoding import DecodingConfig, describe
from pipeline.labels import LabelFilters, judge

THRESHOLDS = [round(0.05 * k, 2) for k in range(21)]  # the report's curve


def curve(rows: list[dict[str, Any]], filters: LabelFilters) -> list[dict[str, Any]]:
    """Keep rate, and WER of kept and rejected utterances where references exist, per confidence threshold
    (the other filters as set)."""
    import jiwer

    from pipeline.lm.text import plain_text

    points = []
    scored = [(r, plain_text(r[schema.REFERENCE_TEXT]), plain_text(r[schema.TEXT])) for r in rows
              if r[schema.REFERENCE_TEXT] and r[schema.TEXT] is not None]
    for threshold in THRESHOLDS:
        at = dataclasses.replace(filters, min_confidence=threshold)
        verdicts = [judge(r, at) is None for r in rows]
        point: dict[str, Any] = {"threshold": threshold,
                                 "keep_rate": sum(verdicts) / len(rows) if rows else 0.0}
        for name, keep in (("kept", True), ("rejected", False)):
            chosen = [(reference, text) for r, reference, text in scored if (judge(r, at) is None) == keep]
            point[f"{name}_wer"] = (jiwer.wer([reference for reference, _ in chosen], [text for _, text in chosen])
                                    if chosen else None)
        points.append(point)
    return points


def plot(points: list[dict[str, Any]], threshold: float) -> bytes:
    from pipeline.reports.plots import new_plot, png

    figure, axes = new_plot()
    x = [p["threshold"] for p in points]
    axes.plot(x, [100 * p["keep_rate"] for p in points], marker="o", label="kept, % of utterances")
    for name in ("kept", "rejected"):
        if any(p[f"{name}_wer"] is not None for p in points):
            axes.plot(x, [100 * p[f"{name}_wer"] if p[f"{name}_wer"] is not None else float("nan") for p in points],
                      marker=".", label=f"WER of {name} (normalised), %")
    axes.axvline(threshold, color="gray", linestyle="--", label=f"threshold {threshold:g}")
    return png(figure, axes, "minimum utterance confidence", "%")


def report_markdown(report: dict[str, Any]) -> str:
    lines = ["# Pseudo-labelling run", "",
             f"{report['new_utterances']} new utterances: {report['kept']} kept ({report['keep_rate']:.1%}), "
             f"{report['rejected']} rejected. Model `{report['model']}`, decoding `{report['decoding']}`.", ""]
    if not report["new_utterances"]:
        lines += ["Nothing new to label: every utterance of the input was labelled by an earlier run "
                  "(or the input is empty). The manifests of this run are empty.", ""]
    elif not report["kept"]:
        lines += ["**No utterance was kept**: every one was rejected by a filter (the reasons below), so `train.json` "
                  "is empty. If that is unexpected, look at the reasons: a threshold above what this model's "
                  "confidences reach, or every row an error row.", ""]
    scores = report.get("scores") or {}
    if any(scores.get(name) for name in ("all", "kept", "rejected")):
        from pipeline.reports.scoring import NORMALISED, WRITTEN

        lines += ["Against the input's own texts, normalised, then as written in brackets "
                  f"({NORMALISED}; {WRITTEN}):", "",
                  "| utterances | with a reference text | WER | CER |", "| --- | --- | --- | --- |"]
        for name in ("all", "kept", "rejected"):
            measured = scores.get(name)
            lines += [f"| {name} | {measured['utterances'] if measured else 0} | "
                      f"{_rate(measured, 'wer')} | {_rate(measured, 'cer')} |"]
        lines += [""]
    if report.get("still_unreadable"):
        lines += [f"{report['still_unreadable']} utterances that an earlier run could not read (listed in its "
                  "`rejected.json`) were tried again and still could not be read.", ""]
    lines += ["| filter | setting |", "| --- | --- |"]
    lines += [f"| {name} | {value} |" for name, value in report["filters"].items()]
    lines += ["", "| reason | utterances |", "| --- | --- |"]
    lines += [f"| {reason} | {count} |" for reason, count in report["reasons"].items()] or ["| - | 0 |"]
    if report.get("segmented_rows"):
        lines += ["", f"{report['segmented_rows']} of the {report['rows']} transcripts were longer than "
                      f"{report['max_segment_s']:g} s and were cut between words into phrases, each judged on its "
                      "own (counted above as utterances; a phrase has no reference text of its own); the kept "
                      f"phrases were packed into segments of at most {report['max_segment_s']:g} s: "
                      f"{report['written']} training utterances in all."]
    lines += ["", "![keep rate and WER against the confidence threshold](confidence.png)", ""]
    written = [report["train"], report["train_cuts"], report["rejected_manifest"]]
    lines += ["Manifests: " + ", ".join(f"`{uri}`" for uri in written if uri) + "."]
    shards = report.get("shards")
    if shards:
        lines += ["", f"Shards: {shards['utterances']} utterances ({shards['audio_s'] / 3600:.2f} h of audio) in "
                      f"{shards['shards']} shard(s) of each format: "
                      + ", ".join(f"{name} `{uri}`" for name, uri in shards["folders"].items()) + "."]
    return "\n".join(lines) + "\n"


def reason_kind(reason: str) -> str:
    """The filter a rejection reason names (for the report's counts)."""
    for kind in ("error", "empty transcript", "no confidence", "duration", "confidence", "heads disagree",
                 "repetition", "segmenting"):
        if reason.startswith(kind):
            return kind
    return "characters/s"


def _rate(measured: dict[str, Any] | None, what: str) -> str:
    if not measured:
        return "-"
    return f"{measured[what]:.1%} ({measured[f'written_{what}']:.1%})"


def scores_of(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """WER and CER of the rows that have a reference text and a transcript, normalised and as written, and how
    many they are; None where none has both."""
    from pipeline.reports.scoring import error_rates

    chosen = [r for r in rows if r[schema.REFERENCE_TEXT] and r[schema.TEXT] is not None]
    if not chosen:
        return None
    rates = error_rates([r[schema.REFERENCE_TEXT] for r in chosen], [r[schema.TEXT] for r in chosen])
    return {"utterances": len(chosen), "wer": rates.wer, "cer": rates.cer, "written_wer": rates.written_wer,
            "written_cer": rates.written_cer}


def build_report(model_uri: str, decoding: DecodingConfig, filters: LabelFilters, rows: list[dict[str, Any]],
                 kept: list[dict[str, Any]], rejected: list[tuple[dict[str, Any], str]], reasons: dict[str, int],
                 points: list[dict[str, Any]], run_folder_uri: str, summary: dict[str, Any]) -> dict[str, Any]:
    """report.json of a run: counts, keep rate, WER and CER where the input had reference texts (`scores`: all,
    kept, rejected, each None where no such utterance has one; `wer_all`, `wer_kept`, `wer_rejected`: their
    normalised WERs), the curve, the manifests."""
    from pipeline.reports.scoring import NORMALISED, WRITTEN

    scores = {"all": scores_of(rows), "kept": scores_of(kept), "rejected": scores_of([r for r, _ in rejected])}

    def wer(name: str) -> float | None:
        return scores[name]["wer"] if scores[name] else None

    return {
        "model": model_uri, "decoding": describe(decoding), "filters": dataclasses.asdict(filters),
        "new_utterances": len(rows), "kept": len(kept), "rejected": len(rejected),
        "keep_rate": len(kept) / len(rows) if rows else 0.0, "reasons": reasons,
        "scores": scores, "scoring": {"wer": NORMALISED, "written_wer": WRITTEN},
        "wer_all": wer("all"), "wer_kept": wer("kept"), "wer_rejected": wer("rejected"),
        "curve": points, "transcribed_this_run": summary["this_run"]["rows"],
        "train": f"{run_folder_uri}/train.json", "train_cuts": f"{run_folder_uri}/train_cuts.jsonl.gz",
        "rejected_manifest": f"{run_folder_uri}/rejected.json",
    }
