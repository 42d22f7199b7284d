"""Pseudo-labelling runs, the library of `jobs/pseudo_label.py`: the run bookkeeping that makes every utterance
labelled exactly once across nightly runs, and one run from its input to its manifests and report.

Labels live in OUTPUT/<model and decoding>/ (`identity_folder`): transcripts/ (exactly once, as `jobs/transcribe.py`
writes them) and runs/<UTC time>/, one folder a run. A run folder is finished when it holds `labelled.txt`
(written last: the ids it labelled); `labelled_before` reads the finished ones and removes any other, so that
its utterances go into the next run. `prepare_label_run` checks and lists the input before any cluster work;
`label_run` transcribes, cuts transcripts longer than `max_segment_s` into segments and judges each training
utterance (`judge_rows`: `pipeline/labels/segments.py`, `pipeline/labels/filters.py`), writes the kept ones' audio
into shards where asked (`pipeline/labels/shards_out.py`) or, with `cut_audio`, each segment into its own file,
then the manifests and report (`pipeline/reports/pseudo_label.py`), and last `labelled.txt`. The bookkeeping is per
transcript row: a row's segments are all in the run that labelled it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import schema
from pipeline.config import LongAudioConfig, ModelConfig, ResourcesConfig, TranscribeJobConfig
from pipeline.decoding import DecodingConfig, DecodingError, describe, plan_decoding
from pipeline.io import Folder
from pipeline.io.redact import redact
from pipeline.io.vad import vad_problem
from pipeline.labels.filters import (
    LabelFilters,
    audio_entries,
    duration_of,
    judge,
    lhotse_cut,
    nemo_line,
    rejected_line,
    write_jsonl,
)
from pipeline.labels.segments import SEGMENT_OF, SPLIT_PAUSE_S, pack_segment_rows, segment_rows
from pipeline.labels.shards_out import NEMO, OUTPUT_FORMATS, flac_bytes, read_audio, write_shards
from pipeline.model import ModelFacts
from pipeline.preflight import fetched_model
from pipeline.reports.pseudo_label import build_report, curve, plot, reason_kind, report_markdown
from pipeline.settings import check_settings, section, setting, shared

RUNS, TRANSCRIPTS, LABELLED, ERRORS = "runs", "transcripts", "labelled.txt", "errors.txt"


class LabelError(ValueError):
    """Input the job cannot use, found before any cluster work: one line for the user."""


@dataclass(frozen=True)
class LabelConfig:
    """One pseudo-labelling run: its input (`manifest` files and `audio` files, paths, URIs or globs), where the
    labels go (`output`, the same for every run), the model and decoding, and the filters."""

    output: str = setting(help="folder or URI of the labels (reruns go into the same one)")
    manifest: tuple[str, ...] = setting((), "NeMo or Lhotse manifests (paths, URIs, globs)")
    audio: tuple[str, ...] = setting((), "audio files (paths, URIs, globs), one utterance each")
    model: str = shared(TranscribeJobConfig, "model.uri")
    strategy: str = shared(TranscribeJobConfig, "decoding.strategy",
                           help="the decoding strategy (any: each gives confidence)")
    confidence_calibration: str | None = shared(
        TranscribeJobConfig, "decoding.confidence_calibration", group=None,
        help="a calibration map for this model and measure (`benchmarks/confidence.py --write-calibration`): "
             "confidences then read as the share of words right")
    filters: LabelFilters = section("filters (what a kept utterance satisfies)", LabelFilters)
    output_format: tuple[str, ...] = setting(
        (NEMO,), "what the kept utterances are written as, one or more: nemo (train.json and train_cuts.jsonl.gz, "
                 "pointing into the original audio), nemo_tarred (a NeMo tarred audio dataset: audio_K.tar, "
                 "tarred_audio_manifest.json, metadata.yaml), shar (a Lhotse Shar: cuts.K.jsonl.gz, recording.K.tar); "
                 "the sharded ones hold each utterance's audio, FLAC at the model's sample rate",
        choices=OUTPUT_FORMATS, checked=False)
    shard_utterances: int = setting(1000, "most utterances in one shard of --output-format nemo_tarred or shar "
                                          "(shards balanced: sizes differ by at most one)", minimum=1)
    max_segment_s: float = setting(
        20.0, "a transcript longer than this is cut between words into training utterances of at most this many "
              "seconds, each filtered on its own; 0: never cut", minimum=0, finite=True)
    cut_audio: bool = setting(False, "write each segment of a cut transcript as its own FLAC (runs/<time>/audio/), "
                                     "named by train.json instead of an offset into the original audio")
    # how long rows are cut before they are decoded (voice activity by default); `pauses` resumes labels made before
    # voice-activity segmentation existed (their transcripts' claim says pauses)
    segment: str = shared(TranscribeJobConfig, "long_audio.segment")
    cache_dir: str = shared(TranscribeJobConfig, "model.cache_dir")
    device: str = shared(TranscribeJobConfig, "resources.device")
    ray_address: str | None = shared(TranscribeJobConfig, "ray_address")

    def __post_init__(self) -> None:
        check_settings(self)
        unknown = [f for f in self.output_format if f not in OUTPUT_FORMATS]
        if unknown or not self.output_format or len(set(self.output_format)) != len(self.output_format):
            raise ValueError(f"output_format must be one or more of {', '.join(OUTPUT_FORMATS)}, each once, got "
                             f"{' '.join(self.output_format) or 'none'}")


@dataclass(frozen=True)
class LabelInputs:
    """What `prepare_label_run` read and checked before any cluster work."""

    model_path: Path  # the model on this machine
    facts: ModelFacts
    decoding: DecodingConfig
    manifests: list[str]
    audio: list[str]


@dataclass(frozen=True)
class LabelRun:
    """A finished run: its folder (OUTPUT/<model and decoding>/runs/<UTC time>) and its report."""

    folder: Folder
    report: dict[str, Any]


def print_line(line: str) -> None:
    """A progress line of the job on the driver's console."""
    print(f"pseudo_label: {line}", flush=True)


def identity_folder(output: Folder, model_sha256: str, decoding: DecodingConfig) -> Folder:
    """OUTPUT/<model and decoding>: one per model and decoding, so that a new one labels everything again."""
    description = describe(decoding)
    key = hashlib.sha1(f"{model_sha256}\n{description}".encode()).hexdigest()[:12]
    folder = output.child(f"labels-{key}")
    if not folder.exists("identity.json"):
        folder.write("identity.json", json.dumps({"model_sha256": model_sha256, "decoding": description}, indent=1))
    return folder


def labelled_before(runs: Folder, say: Callable[[str], None] = print_line) -> tuple[set[str], set[str]]:
    """Utterance ids that finished runs labelled (put in their manifests with a transcript), and ids whose audio
    they could not read and reported in their `rejected.json` (retried each run, reported once); unfinished run
    folders are removed (and named through `say`)."""
    done: set[str] = set()
    reported: set[str] = set()
    for name in runs.folders():
        run = runs.child(name)
        if run.exists(LABELLED):
            done.update(run.read(LABELLED).split())
            if run.exists(ERRORS):
                reported.update(run.read(ERRORS).split())
        else:
            say(f"removing the unfinished run {redact(run.uri)}: its utterances go into this run")
            run.remove()
    return done, reported - done


def prepare_label_run(config: LabelConfig) -> LabelInputs:
    """The run's input checked and listed before any cluster work (`LabelError`, or a `PreflightError` for the
    model): the model fetched, the decoding planned (with confidence; the other head decoded beside the chosen
    one where the model has two and the filter is on), the manifests and audio files listed."""
    from pipeline.io import expand_manifest_uris
    from pipeline.model import read_model_facts

    if not config.manifest and not config.audio:
        raise LabelError("nothing to label: pass --manifest and/or --audio")
    segment_problem = vad_problem(config.segment, LongAudioConfig().chunk_s)
    if segment_problem:
        raise LabelError(segment_problem)
    model_path = fetched_model(config.model, config.cache_dir)
    facts = read_model_facts(model_path)
    try:
        decoding = DecodingConfig(strategy=config.strategy, confidence=True, confidence_aggregation="mean",
                                  confidence_calibration=config.confidence_calibration,
                                  head_agreement=len(facts.heads) > 1 and config.filters.min_head_agreement > 0)
    except ValueError as error:
        raise LabelError(str(error)) from None
    try:
        plan_decoding(facts, decoding, model_name=config.model)
    except DecodingError as error:
        raise LabelError(str(error)) from None
    try:
        manifests = expand_manifest_uris(config.manifest) if config.manifest else []
        audio = expand_manifest_uris(config.audio) if config.audio else []
    except FileNotFoundError as error:
        raise LabelError(str(error).replace("no manifest matches", "nothing matches")) from None
    return LabelInputs(model_path=model_path, facts=facts, decoding=decoding, manifests=manifests, audio=audio)


def label_run(config: LabelConfig, inputs: LabelInputs, started: float, say: Callable[[str], None] = print_line
              ) -> LabelRun:
    """One run, `started` at this time (seconds since the epoch; its folder's name): transcribe what no earlier
    run transcribed with this model and decoding, judge what no finished run labelled, write the run's
    manifests, report and plot, and last `labelled.txt`, its commit."""
    from pipeline.graph import JobError, connect_ray, run_transcription
    from pipeline.io import cached_sha256, models_dir, sink

    filters, decoding = config.filters, inputs.decoding
    model_sha256 = cached_sha256(inputs.model_path, models_dir(config.cache_dir))  # once per model version per node
    folder = identity_folder(Folder(config.output), model_sha256, decoding)
    runs = folder.child(RUNS)
    done, reported_errors = labelled_before(runs, say)
    run_name = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    taken = set(runs.folders())
    run_name = next(f"{run_name}-{k}" if k else run_name for k in range(len(taken) + 1)
                    if (f"{run_name}-{k}" if k else run_name) not in taken)
    run_folder = runs.child(run_name)
    manifests = list(inputs.manifests)
    if inputs.audio:
        entries = audio_entries(inputs.audio)
        run_folder.write("audio.json", write_jsonl(entries))
        manifests.append(f"{run_folder.uri}/audio.json")
    say(f"{len(manifests)} manifest(s), {len(inputs.audio)} audio file(s) -> {redact(folder.uri)}")

    connect_ray(config.ray_address)
    transcription = TranscribeJobConfig(manifests=tuple(manifests), output=folder.child(TRANSCRIPTS).uri,
                                        model=ModelConfig(uri=config.model, cache_dir=config.cache_dir),
                                        decoding=decoding, resources=ResourcesConfig(device=config.device),
                                        long_audio=LongAudioConfig(segment=config.segment),
                                        retry_errors=True)  # audio unreadable last night (an outage) gets another try
    try:
        summary = run_transcription(transcription)
    except (JobError, FileNotFoundError) as error:
        raise LabelError(str(error)) from None

    table = sink.read_output(transcription.output)
    rows = [r for r in table.to_pylist() if r[schema.UTTERANCE_ID] not in done]
    failing_again = [r[schema.STATUS] != schema.STATUS_OK and r[schema.UTTERANCE_ID] in reported_errors
                     for r in rows]  # reported by an earlier run, tried again, unreadable still: counted only
    still_failing = sum(failing_again)
    rows = [r for r, again in zip(rows, failing_again) if not again]
    units, judged_kept, rejected, segmented, kept = judge_rows(rows, filters, config.max_segment_s)
    sample_rate = inputs.facts.sample_rate
    shards = write_shards(kept, run_folder, config.output_format, sample_rate, config.shard_utterances, say)
    if shards.failed:
        rejected += [(r, f"error: {shards.failed[r[schema.UTTERANCE_ID]]}") for r in kept
                     if r[schema.UTTERANCE_ID] in shards.failed]
        kept = [r for r in kept if r[schema.UTTERANCE_ID] not in shards.failed]
    in_shards = NEMO in config.output_format and any(r.get(schema.SHARD_MEMBER) for r in kept)
    if config.cut_audio or in_shards:  # a NeMo line cannot name a member of a tar: such audio gets its own file
        kept, failed = cut_segment_audio(kept, run_folder, sample_rate, segments=config.cut_audio)
        rejected += failed
    reasons: dict[str, int] = {}
    for _, reason in rejected:
        kind = reason_kind(reason)
        reasons[kind] = reasons.get(kind, 0) + 1
    if NEMO in config.output_format:
        run_folder.write("train.json", write_jsonl([nemo_line(r) for r in kept]))
        run_folder.write("train_cuts.jsonl.gz", gzip.compress(
            write_jsonl([lhotse_cut(r, sample_rate) for r in kept]).encode(), mtime=0))
    run_folder.write("rejected.json", write_jsonl([rejected_line(r, reason) for r, reason in rejected]))
    points = curve(units, filters)
    report = build_report(config.model, decoding, filters, units, judged_kept, rejected, reasons, points,
                          run_folder.uri, summary)
    report["written"] = len(kept)  # a cut row's kept phrases packed into segments: the lines of train.json
    if NEMO not in config.output_format:
        report["train"] = report["train_cuts"] = None
    report["rows"] = len(rows)
    report["segmented_rows"] = segmented
    report["max_segment_s"] = config.max_segment_s
    report["shards"] = {"folders": shards.folders, "shards": shards.shards, "utterances": shards.utterances,
                        "audio_s": round(shards.audio_s, 3)} if shards.folders else None
    report["still_unreadable"] = still_failing
    report["wall_s"] = round(time.time() - started, 1)
    run_folder.write("report.json", json.dumps(report, indent=1))
    run_folder.write("report.md", report_markdown(report))
    run_folder.write("confidence.png", plot(points, filters.min_confidence))
    unreadable = [r[schema.STATUS] != schema.STATUS_OK for r in rows]
    run_folder.write(ERRORS, "".join(r[schema.UTTERANCE_ID] + "\n" for r, bad in zip(rows, unreadable) if bad))
    # last, as the run's commit: the ids it labelled (its error rows are tried again by the next run)
    run_folder.write(LABELLED, "".join(r[schema.UTTERANCE_ID] + "\n" for r, bad in zip(rows, unreadable) if not bad))
    return LabelRun(folder=run_folder, report=report)


def judge_rows(rows: list[dict[str, Any]], filters: LabelFilters, max_segment_s: float
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[tuple[dict[str, Any], str]], int,
                          list[dict[str, Any]]]:
    """The training utterances the rows make, judged: (every candidate judged, the kept ones, the rejected with
    their reasons, how many rows were cut, what is written: the kept ones with a cut row's kept phrases packed).

    A row longer than `max_segment_s` (0: none is) is cut between its words into phrases (at every pause of
    `SPLIT_PAUSE_S` or more, and where the cap needs: `pipeline/labels/segments.py`), each judged on its own, and
    runs of kept phrases are packed again into segments of at most `max_segment_s`; the other rows are judged
    whole."""
    units: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    rejected: list[tuple[dict[str, Any], str]] = []
    written: list[dict[str, Any]] = []
    segmented = 0
    for row in rows:
        long = (max_segment_s > 0 and row[schema.STATUS] == schema.STATUS_OK and (row[schema.TEXT] or "").strip()
                and duration_of(row) > max_segment_s)
        if not long:
            units.append(row)
            reason = judge(row, filters)
            if reason is None:
                kept.append(row)
                written.append(row)
            else:
                rejected.append((row, reason))
            continue
        pieces = segment_rows(row, max_segment_s, split_pause_s=SPLIT_PAUSE_S)
        if not pieces:
            units.append(row)
            rejected.append((row, f"segmenting: {duration_of(row):.1f} s is longer than --max-segment-s "
                                  f"{max_segment_s:g} and the transcript has no word times to cut at"))
            continue
        segmented += 1
        phrases = []
        for unit, segment in pieces:
            units.append(unit)
            reason = (f"segmenting: one word of {segment.duration_s:.1f} s, longer than --max-segment-s "
                      f"{max_segment_s:g}" if segment.too_long else judge(unit, filters))
            if reason is None:
                kept.append(unit)
            else:
                rejected.append((unit, reason))
            phrases.append((unit, reason is None))
        written += pack_segment_rows(phrases, max_segment_s, lambda merged: judge(merged, filters) is None)
    return units, kept, rejected, segmented, written


def cut_segment_audio(kept: list[dict[str, Any]], run_folder: Folder, sample_rate: int, segments: bool = True
                      ) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], str]]]:
    """`--cut-audio` (`segments`): each kept segment's audio in its own FLAC, runs/<time>/audio/<segment id>.flac,
    and the segment's row pointing at it (offset 0; where it came from as `source_audio_filepath`,
    `source_audio_offset`, and `source_shard_member` for a member of a tar shard); whole utterances are left as they
    are, but for those whose audio is a member of an input tar shard (always cut: a NeMo manifest line cannot name
    a tar's member). A row whose audio no longer reads is rejected with its error."""
    to_cut = [r for r in kept if (segments and r.get(SEGMENT_OF)) or r.get(schema.SHARD_MEMBER)]
    if not to_cut:
        return kept, []
    cut: dict[str, dict[str, Any]] = {}
    failed: list[tuple[dict[str, Any], str]] = []
    for row, audio in read_audio(to_cut, sample_rate):
        if isinstance(audio, str):
            failed.append((row, f"error: {audio}"))
            continue
        name = f"audio/{row[schema.UTTERANCE_ID]}.flac"
        run_folder.write(name, flac_bytes(audio, sample_rate))
        cut[row[schema.UTTERANCE_ID]] = {
            **row, schema.AUDIO_FILEPATH: run_folder.uri_of(name), schema.OFFSET: 0.0, schema.CHANNEL: None,
            schema.FILE_DURATION: None, schema.SHARD_MEMBER: None,
            "source_audio_filepath": row[schema.AUDIO_FILEPATH], "source_audio_offset": row[schema.OFFSET],
            **({"source_shard_member": row[schema.SHARD_MEMBER]} if row.get(schema.SHARD_MEMBER) else {})}
    bad = {r[schema.UTTERANCE_ID] for r, _ in failed}
    return [cut.get(r[schema.UTTERANCE_ID], r) for r in kept if r[schema.UTTERANCE_ID] not in bad], failed
