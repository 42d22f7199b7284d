"""Nightly pseudo-labelling: new audio in, transcripts with confidence, filters, training manifests out.

    python jobs/pseudo_label.py --audio 's3://bucket/incoming/**/*.flac' --output s3://bucket/labels
    python jobs/pseudo_label.py --manifest new.json --output out/labels --min-confidence 0.7

Each run:
1. lists its input: `--manifest` files (as `jobs/transcribe.py` reads them) and `--audio` files or globs (each
   file one utterance, its duration read from the header, its id made of URI, size and modification time or
   ETag, so that a rewritten file is labelled again);
2. transcribes what no earlier run into the same `--output` transcribed with the same model and decoding, with
   word confidence, into OUTPUT/<model and decoding>/transcripts/ (exactly once, as `jobs/transcribe.py`
   writes it; a new model or decoding gets its own folder, beside the old labels);
3. judges every transcript that no earlier run put in a manifest (`pipeline/labels/filters.py`: error rows, empty
   text, duration, confidence, characters per second, repeated n-grams) and writes, in
   OUTPUT/<model and decoding>/runs/<UTC time>/:
   - `train.json` (NeMo JSON-lines: audio_filepath, duration, offset, text = the pseudo-label, confidence,
     orig_text) and `train_cuts.jsonl.gz` (Lhotse cuts) of the kept utterances;
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

Ray: RAY_ADDRESS or --ray-address, else a private local Ray; on a cluster `ray job submit -- python
jobs/pseudo_label.py ...` with an object-store `--output`.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import schema  # noqa: E402
from pipeline.io import sink
from pipeline.config import BUNDLED_MODEL, ModelConfig, ResourcesConfig, TranscribeJobConfig  # noqa: E402
from pipeline.decoding.plan import DecodingConfig, DecodingError, describe, plan_decoding  # noqa: E402
from pipeline.io.folder import Folder  # noqa: E402
from pipeline.graph import connect_ray  # noqa: E402
from pipeline.labels.filters import (  # noqa: E402
    LabelFilters,
    audio_entries,
    judge,
    lhotse_cut,
    nemo_line,
    rejected_line,
    write_jsonl,
)
from pipeline.io.redact import redact  # noqa: E402

RUNS, TRANSCRIPTS, LABELLED, ERRORS = "runs", "transcripts", "labelled.txt", "errors.txt"
THRESHOLDS = [round(0.05 * k, 2) for k in range(21)]  # the report's curve


class LabelError(ValueError):
    """Input the job cannot use, found before any cluster work: one line for the user."""


def identity_folder(output: Folder, model_sha256: str, decoding: DecodingConfig) -> Folder:
    """OUTPUT/<model and decoding>: one per model and decoding, so that a new one labels everything again."""
    description = describe(decoding)
    key = hashlib.sha1(f"{model_sha256}\n{description}".encode()).hexdigest()[:12]
    folder = output.child(f"labels-{key}")
    if not folder.exists("identity.json"):
        folder.write("identity.json", json.dumps({"model_sha256": model_sha256, "decoding": description}, indent=1))
    return folder


def labelled_before(runs: Folder) -> tuple[set[str], set[str]]:
    """Utterance ids that finished runs labelled (put in their manifests with a transcript), and ids whose audio
    they could not read and reported in their `rejected.json` (retried each run, reported once); unfinished run
    folders are removed."""
    done: set[str] = set()
    reported: set[str] = set()
    for name in runs.folders():
        run = runs.child(name)
        if run.exists(LABELLED):
            done.update(run.read(LABELLED).split())
            if run.exists(ERRORS):
                reported.update(run.read(ERRORS).split())
        else:
            print(f"pseudo_label: removing the unfinished run {redact(run.uri)}: its utterances go into this run",
                  flush=True)
            run.remove()
    return done, reported - done


def curve(rows: list[dict[str, Any]], filters: LabelFilters) -> list[dict[str, Any]]:
    """Keep rate, and WER of kept and rejected utterances where references exist, per confidence threshold
    (the other filters as set)."""
    import dataclasses

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


def parser() -> argparse.ArgumentParser:
    defaults, filters = TranscribeJobConfig(), LabelFilters()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--manifest", nargs="*", default=[], help="NeMo or Lhotse manifests (paths, URIs, globs)")
    p.add_argument("--audio", nargs="*", default=[], help="audio files (paths, URIs, globs), one utterance each")
    p.add_argument("--output", required=True, help="folder or URI of the labels (reruns go into the same one)")
    p.add_argument("--model", default=str(BUNDLED_MODEL), help="NeMo .nemo (default: the bundled model)")
    p.add_argument("--decoding", dest="strategy", default="greedy",
                   help="the decoding strategy (any: each gives confidence; default greedy)")
    p.add_argument("--min-confidence", type=float, default=filters.min_confidence,
                   help=f"utterance confidence a kept utterance needs (default {filters.min_confidence:g})")
    p.add_argument("--confidence-calibration", metavar="FILE",
                   help="a calibration map for this model and measure (`benchmarks/confidence.py "
                        "--write-calibration`): confidences then read as the share of words right")
    p.add_argument("--min-duration-s", type=float, default=filters.min_duration_s)
    p.add_argument("--max-duration-s", type=float, default=filters.max_duration_s)
    p.add_argument("--min-chars-per-s", type=float, default=filters.min_chars_per_s)
    p.add_argument("--max-chars-per-s", type=float, default=filters.max_chars_per_s)
    p.add_argument("--max-repeats", type=int, default=filters.max_repeats,
                   help="a word n-gram repeated back to back more than this is rejected")
    p.add_argument("--min-head-agreement", type=float, default=filters.min_head_agreement,
                   help="a hybrid model (both heads): the share of words the other head's greedy text agrees on "
                        f"(1 - WER between them) a kept utterance needs; 0 turns the second decode off "
                        f"(default {filters.min_head_agreement:g})")
    p.add_argument("--cache-dir", default=defaults.model.cache_dir)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=defaults.resources.device)
    p.add_argument("--ray-address", help="Ray cluster (default: RAY_ADDRESS, else a private local Ray)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args)
    except LabelError as error:
        raise SystemExit(f"pseudo_label: {redact(str(error))}") from None


def run(args: argparse.Namespace) -> int:
    started = time.time()
    from pipeline.io.fetch import fetch_file, file_sha256
    from pipeline.model.nemo_file import read_model_facts
    from pipeline.io.uris import expand_manifest_uris

    if not args.manifest and not args.audio:
        raise LabelError("nothing to label: pass --manifest and/or --audio")
    try:
        filters = LabelFilters(args.min_confidence, args.min_duration_s, args.max_duration_s, args.min_chars_per_s,
                               args.max_chars_per_s, args.max_repeats, args.min_head_agreement)
    except ValueError as error:
        raise LabelError(str(error)) from None
    if "://" not in args.model and not Path(args.model).is_file():
        raise LabelError(f"no model at {args.model}: pass --model PATH_OR_URI (a NeMo .nemo file)")
    model_path = fetch_file(args.model, cache_dir=f"{args.cache_dir}/models")
    facts = read_model_facts(model_path)
    try:  # the other head decoded beside the chosen one where the model has two and the filter is on
        decoding = DecodingConfig(strategy=args.strategy, confidence=True, confidence_aggregation="mean",
                                  confidence_calibration=args.confidence_calibration,
                                  head_agreement=len(facts.heads) > 1 and filters.min_head_agreement > 0)
    except ValueError as error:
        raise LabelError(str(error)) from None
    try:
        plan_decoding(facts, decoding, model_name=args.model)
    except DecodingError as error:
        raise LabelError(str(error)) from None
    try:
        manifests = expand_manifest_uris(args.manifest) if args.manifest else []
        audio = expand_manifest_uris(args.audio) if args.audio else []
    except FileNotFoundError as error:
        raise LabelError(str(error).replace("no manifest matches", "nothing matches")) from None

    output = Folder(args.output)
    folder = identity_folder(output, file_sha256(model_path), decoding)
    runs = folder.child(RUNS)
    done, reported_errors = labelled_before(runs)
    run_name = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    taken = set(runs.folders())
    run_name = next(f"{run_name}-{k}" if k else run_name for k in range(len(taken) + 1)
                    if (f"{run_name}-{k}" if k else run_name) not in taken)
    run_folder = runs.child(run_name)
    if audio:
        entries = audio_entries(audio)
        run_folder.write("audio.json", write_jsonl(entries))
        manifests.append(f"{run_folder.uri}/audio.json")
    print(f"pseudo_label: {len(manifests)} manifest(s), {len(audio)} audio file(s) -> {redact(folder.uri)}",
          flush=True)

    connect_ray(args.ray_address)
    from pipeline.graph import JobError, run_transcription

    config = TranscribeJobConfig(manifests=tuple(manifests), output=folder.child(TRANSCRIPTS).uri,
                                 model=ModelConfig(uri=args.model, cache_dir=args.cache_dir), decoding=decoding,
                                 resources=ResourcesConfig(device=args.device),
                                 retry_errors=True)  # audio unreadable last night (an outage) gets another try
    try:
        summary = run_transcription(config)
    except (JobError, FileNotFoundError) as error:
        raise LabelError(str(error)) from None

    table = sink.read_output(config.output)
    rows = [r for r in table.to_pylist() if r[schema.UTTERANCE_ID] not in done]
    failing_again = [r[schema.STATUS] != schema.STATUS_OK and r[schema.UTTERANCE_ID] in reported_errors
                     for r in rows]  # reported by an earlier run, tried again, unreadable still: counted only
    still_failing = sum(failing_again)
    rows = [r for r, again in zip(rows, failing_again) if not again]
    kept, rejected, reasons = [], [], {}
    for row in rows:
        reason = judge(row, filters)
        if reason is None:
            kept.append(row)
        else:
            rejected.append((row, reason))
            kind = reason_kind(reason)
            reasons[kind] = reasons.get(kind, 0) + 1
    run_folder.write("train.json", write_jsonl([nemo_line(r) for r in kept]))
    run_folder.write("train_cuts.jsonl.gz", gzip.compress(
        write_jsonl([lhotse_cut(r, facts.sample_rate) for r in kept]).encode(), mtime=0))
    run_folder.write("rejected.json", write_jsonl([rejected_line(r, reason) for r, reason in rejected]))
    points = curve(rows, filters)
    report = build_report(args, decoding, filters, rows, kept, rejected, reasons, points, run_folder, summary)
    report["still_unreadable"] = still_failing
    report["wall_s"] = round(time.time() - started, 1)
    run_folder.write("report.json", json.dumps(report, indent=1))
    run_folder.write("report.md", report_markdown(report))
    run_folder.write("confidence.png", plot(points, filters.min_confidence))
    unreadable = [r[schema.STATUS] != schema.STATUS_OK for r in rows]
    run_folder.write(ERRORS, "".join(r[schema.UTTERANCE_ID] + "\n" for r, bad in zip(rows, unreadable) if bad))
    # last, as the run's commit: the ids it labelled (its error rows are tried again by the next run)
    run_folder.write(LABELLED, "".join(r[schema.UTTERANCE_ID] + "\n" for r, bad in zip(rows, unreadable) if not bad))
    print(report_markdown(report), flush=True)
    print(f"pseudo_label: {len(kept)} kept, {len(rejected)} rejected -> {redact(run_folder.uri)}", flush=True)
    return 0


def build_report(args, decoding, filters, rows, kept, rejected, reasons, points, run_folder, summary) -> dict:
    import dataclasses

    import jiwer

    def wer(chosen: list[dict[str, Any]]) -> float | None:
        chosen = [r for r in chosen if r[schema.REFERENCE_TEXT] and r[schema.TEXT] is not None]
        return jiwer.wer([r[schema.REFERENCE_TEXT] for r in chosen], [r[schema.TEXT] for r in chosen]) \
            if chosen else None

    return {
        "model": args.model, "decoding": describe(decoding), "filters": dataclasses.asdict(filters),
        "new_utterances": len(rows), "kept": len(kept), "rejected": len(rejected),
        "keep_rate": len(kept) / len(rows) if rows else 0.0, "reasons": reasons,
        "wer_all": wer(rows), "wer_kept": wer(kept), "wer_rejected": wer([r for r, _ in rejected]),
        "curve": points, "transcribed_this_run": summary["this_run"]["rows"],
        "train": f"{run_folder.uri}/train.json", "train_cuts": f"{run_folder.uri}/train_cuts.jsonl.gz",
        "rejected_manifest": f"{run_folder.uri}/rejected.json",
    }


if __name__ == "__main__":
    sys.exit(main())
