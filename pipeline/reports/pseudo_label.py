"""The report of a pseudo-labelling run (`jobs/pseudo_label.py`, `pipeline/labels/runs.py`): counts and reasons, the
WER of kept and rejected utterances where the input had reference texts, and the keep rate and WER against the
confidence threshold (`curve`, `plot`)."""

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

    points = []
    with_reference = [r for r in rows if r[schema.REFERENCE_TEXT]]
    for threshold in THRESHOLDS:
        at = dataclasses.replace(filters, min_confidence=threshold)
        verdicts = [judge(r, at) is None for r in rows]
        point: dict[str, Any] = {"threshold": threshold,
                                 "keep_rate": sum(verdicts) / len(rows) if rows else 0.0}
        for name, keep in (("kept", True), ("rejected", False)):
            chosen = [r for r in with_reference if (judge(r, at) is None) == keep and r[schema.TEXT] is not None]
            point[f"{name}_wer"] = (jiwer.wer([r[schema.REFERENCE_TEXT] for r in chosen],
                                              [r[schema.TEXT] for r in chosen]) if chosen else None)
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
                      marker=".", label=f"WER of {name}, %")
    axes.axvline(threshold, color="gray", linestyle="--", label=f"threshold {threshold:g}")
    return png(figure, axes, "minimum utterance confidence", "%")


def report_markdown(report: dict[str, Any]) -> str:
    lines = ["# Pseudo-labelling run", "",
             f"{report['new_utterances']} new utterances: {report['kept']} kept ({report['keep_rate']:.1%}), "
             f"{report['rejected']} rejected. Model `{report['model']}`, decoding `{report['decoding']}`.", ""]
    if report.get("wer_all") is not None:
        lines += [f"WER against the input's own texts: all {report['wer_all']:.1%}, kept "
                  f"{report['wer_kept']:.1%}" + (f", rejected {report['wer_rejected']:.1%}"
                                                  if report.get("wer_rejected") is not None else "") + ".", ""]
    if report.get("still_unreadable"):
        lines += [f"{report['still_unreadable']} utterances that an earlier run could not read (listed in its "
                  "`rejected.json`) were tried again and still could not be read.", ""]
    lines += ["| filter | setting |", "| --- | --- |"]
    lines += [f"| {name} | {value} |" for name, value in report["filters"].items()]
    lines += ["", "| reason | utterances |", "| --- | --- |"]
    lines += [f"| {reason} | {count} |" for reason, count in report["reasons"].items()] or ["| - | 0 |"]
    lines += ["", "![keep rate and WER against the confidence threshold](confidence.png)", "",
              f"Manifests: `{report['train']}`, `{report['train_cuts']}`, `{report['rejected_manifest']}`."]
    return "\n".join(lines) + "\n"


def reason_kind(reason: str) -> str:
    """The filter a rejection reason names (for the report's counts)."""
    for kind in ("error", "empty transcript", "no confidence", "duration", "confidence", "heads disagree",
                 "repetition"):
        if reason.startswith(kind):
            return kind
    return "characters/s"


def build_report(model_uri: str, decoding: DecodingConfig, filters: LabelFilters, rows: list[dict[str, Any]],
                 kept: list[dict[str, Any]], rejected: list[tuple[dict[str, Any], str]], reasons: dict[str, int],
                 points: list[dict[str, Any]], run_folder_uri: str, summary: dict[str, Any]) -> dict[str, Any]:
    """report.json of a run: counts, keep rate, WER where the input had reference texts, the curve, the manifests."""
    import jiwer

    def wer(chosen: list[dict[str, Any]]) -> float | None:
        chosen = [r for r in chosen if r[schema.REFERENCE_TEXT] and r[schema.TEXT] is not None]
        return jiwer.wer([r[schema.REFERENCE_TEXT] for r in chosen], [r[schema.TEXT] for r in chosen]) \
            if chosen else None

    return {
        "model": model_uri, "decoding": describe(decoding), "filters": dataclasses.asdict(filters),
        "new_utterances": len(rows), "kept": len(kept), "rejected": len(rejected),
        "keep_rate": len(kept) / len(rows) if rows else 0.0, "reasons": reasons,
        "wer_all": wer(rows), "wer_kept": wer(kept), "wer_rejected": wer([r for r, _ in rejected]),
        "curve": points, "transcribed_this_run": summary["this_run"]["rows"],
        "train": f"{run_folder_uri}/train.json", "train_cuts": f"{run_folder_uri}/train_cuts.jsonl.gz",
        "rejected_manifest": f"{run_folder_uri}/rejected.json",
    }
