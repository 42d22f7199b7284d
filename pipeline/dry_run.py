"""`--dry-run`: a transcription job checked without running it. No Ray, no decoding, nothing written.

What it checks, each as the run itself would:
- the output: refused if it holds results of another model or decoding (`graph.check_output`, and once the model is
  fetched, its content), and the rows committed there already, which the run skips (`sink.committed_ids`);
- the model: fetched into the node's cache (a remote model is downloaded once; the run then finds it there), its
  facts read and the decoding planned (`graph.plan_job_decoding`): a strategy it cannot run is refused. With
  `device = auto` it is planned for the CPU (the cluster's GPUs are not known without it);
- the manifests: every line read and parsed (`read_manifest`), or with `--limit` the first rows
  (`graph.first_rows`): rows, error rows with examples, rows whose audio lies outside `--allowed-roots`, and the
  audio seconds the manifests' durations add up to, in all and for the rows the run would transcribe;
- a sharded corpus (docs/shards.md): its listings counted as manifests are; a WebDataset tar's rows are not counted
  (only reading the whole tar lists them: `shards_with_rows_unknown`), and a shard's row is checked on its shard's
  first audio member (the start of the tar);
- the audio: the first `CHECK_S` seconds of a sample of the rows to transcribe (`AUDIO_SAMPLE` rows at most, taken
  in turn from each manifest, so that a manifest whose paths are all wrong shows), read as the audio stage reads
  them (`load_audio`: by byte range where the format allows, so a file's start, not all of it): a file that cannot
  be read or decoded is named with its row, and the sample rates and channel counts found are counted.

`dry_run` returns the totals as a dict (the job prints it as JSON) and `dry_run_lines` says them in words.
"""

from __future__ import annotations

import itertools
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pipeline import schema
from pipeline.config import TranscribeJobConfig
from pipeline.graph import (
    SHOWN_EXAMPLES,
    SNIFF_THREADS,
    FirstRows,
    JobError,
    OutputMismatchError,
    check_output,
    first_rows,
    model_identity,
    output_identity,
    plan_job_decoding,
    shard_listings,
)
from pipeline.io import claim, load_audio, sink
from pipeline.io.audio import AudioBytes, AudioError, decode_audio
from pipeline.io.redact import redact, redact_values
from pipeline.io.shards import AUDIO_EXTENSIONS, ShardListing, TarBroken, tar_members
from pipeline.io.uris import AudioRoots
from pipeline.model import read_model_facts
from pipeline.totals import AUDIO_SAMPLE, ManifestScan, RowsUnknown, scan_listing, scan_manifest

CHECK_S = 1.0  # seconds of each sampled row read, from its offset


def audio_sample(scans: list[ManifestScan]) -> list[dict[str, Any]]:
    """Up to `AUDIO_SAMPLE` rows, taken from each manifest's sample in turn."""
    in_turn = itertools.chain.from_iterable(itertools.zip_longest(*(scan.sample for scan in scans)))
    return list(itertools.islice((row for row in in_turn if row is not None), AUDIO_SAMPLE))


def first_member(tar: str, config: TranscribeJobConfig) -> AudioBytes:
    """The first audio member of a shard (the start of the tar is read, not the rest), as `AudioBytes`; AudioError
    where the tar cannot be read or holds none before it breaks."""
    for item in tar_members(tar, config.input.max_file_bytes):
        if isinstance(item, TarBroken):
            raise AudioError(item.describe(tar))
        if item.data is not None and item.name.rsplit(".", 1)[-1].lower() in AUDIO_EXTENSIONS:
            return AudioBytes(f"{tar} member {item.name}", item.data)
    raise AudioError(f"{tar}: no audio member")


def check_audio(row: dict[str, Any], sample_rate: int, config: TranscribeJobConfig) -> tuple[int, int] | str:
    """The first `CHECK_S` seconds of a row's audio read and decoded: (its sample rate, its channels), or why not,
    naming the manifest and line. A shard's row: its shard's first audio member (`first_member`)."""
    try:
        if row.get(schema.SHARD_MEMBER) is not None or row[schema.AUDIO_FILEPATH].lower().endswith(".tar"):
            member = first_member(row[schema.AUDIO_FILEPATH], config)
            loaded = decode_audio(member.data, sample_rate, 0.0, CHECK_S, None, config.input, member.name)
        else:
            loaded = load_audio(row[schema.AUDIO_FILEPATH], sample_rate, row[schema.OFFSET] or 0.0, CHECK_S,
                                row[schema.CHANNEL], config.input)
    except Exception as error:  # AudioError names the file; anything else is a bug that must not stop the check
        return f"{row[schema.MANIFEST]}, line {row[schema.LINE]}: {error}"
    return loaded.source_rate, loaded.channels


def dry_run(config: TranscribeJobConfig, manifest_uris: list[str]) -> dict[str, Any]:
    """What the run of `config` over `manifest_uris` (expanded, `graph.expand_manifests`) would do; raises
    `graph.JobError` where the run would be refused."""
    check_output(config)
    model = model_identity(config)
    try:
        claim.check_identity(config.output, output_identity(config, model.sha256))
    except claim.IdentityMismatch as error:
        raise OutputMismatchError(str(error)) from None
    device = config.resources.device if config.resources.device != "auto" else "cpu"
    facts = read_model_facts(model.path)
    plan = plan_job_decoding(facts, config, device)
    committed = sink.committed_ids(config.output, ok_only=config.retry_errors)
    listings = shard_listings(config)
    if listings is not None and config.limit is not None:
        raise JobError("--limit reads the first rows of loose manifests, not a sharded corpus's shards")
    first = first_rows(manifest_uris, config.limit) if listings is None else FirstRows(
        [listing.name for listing in listings], {}, False)
    roots = AudioRoots(config.input.allowed_roots)
    unknown: list[ShardListing] = []  # WebDataset tars: their rows are known only once read

    def scan(index: int) -> ManifestScan:
        if listings is None:
            uri = first.manifest_uris[index]
            return scan_manifest(uri, first.row_limits.get(uri), committed, roots)
        try:
            return scan_listing(listings[index], committed, roots)
        except RowsUnknown:
            unknown.append(listings[index])
            tar = listings[index].name  # its first member is checked as a sample
            return ManifestScan(tar, sample=[{schema.AUDIO_FILEPATH: tar, schema.MANIFEST: tar, schema.LINE: 0,
                                              schema.SHARD_MEMBER: None}])

    with ThreadPoolExecutor(max_workers=max(1, min(SNIFF_THREADS, len(first.manifest_uris)))) as pool:
        scans = list(pool.map(scan, range(len(first.manifest_uris))))
        sample = audio_sample(scans)
        checked = list(pool.map(lambda row: check_audio(row, facts.sample_rate, config), sample))

    def total(name: str) -> Any:
        return sum(getattr(scan, name) for scan in scans)

    readable = [outcome for outcome in checked if not isinstance(outcome, str)]
    unreadable = [outcome for outcome in checked if isinstance(outcome, str)]
    return redact_values({
        "dry_run": True, "manifests": len(first.manifest_uris), "rows": total("rows"),
        "rows_error": total("rows_error"), "rows_outside_allowed_roots": total("rows_outside_roots"),
        "rows_committed": total("rows_committed"), "rows_to_transcribe": total("rows_to_transcribe"),
        "audio_hours": total("audio_s") / 3600, "audio_hours_to_transcribe": total("audio_s_to_transcribe") / 3600,
        "row_problem_examples": list(itertools.islice(
            itertools.chain.from_iterable(scan.error_examples for scan in scans), SHOWN_EXAMPLES)),
        "audio_checked": len(checked), "audio_unreadable": len(unreadable),
        "audio_problem_examples": unreadable[:SHOWN_EXAMPLES],
        "sample_rates": dict(sorted(Counter(rate for rate, _ in readable).items())),
        "channels": dict(sorted(Counter(channels for _, channels in readable).items())),
        "limit": config.limit, "rows_beyond_limit": first.rows_beyond,
        # WebDataset tars: rows not counted (only reading a whole tar lists them), and not in the totals above
        "shards_with_rows_unknown": len(unknown),
        "model_id": redact(model.model_id), "decoding": plan.description, "device": device})


def dry_run_lines(report: dict[str, Any], output: str) -> list[str]:
    """The totals of `dry_run` in words, one finding a line; the first line is the verdict."""
    lines = [f"dry run: {report['rows_to_transcribe']:,} rows to transcribe, "
             f"{report['audio_hours_to_transcribe'] * 3600:,.1f} s of audio by the manifests' durations, "
             f"with {report['model_id']} ({report['decoding']}, planned for {report['device']}) into {output}; "
             "nothing was transcribed or written",
             f"{report['manifests']} manifest(s): {report['rows']:,} rows, {report['audio_hours'] * 3600:,.1f} s of "
             f"audio; {report['rows_committed']:,} committed already (skipped), {report['rows_error']:,} unusable "
             f"(error rows), {report['rows_outside_allowed_roots']:,} outside --allowed-roots (error rows)"]
    if report.get("shards_with_rows_unknown"):
        lines.append(f"{report['shards_with_rows_unknown']:,} WebDataset shard(s): their rows are known only once read "
                     "(not counted above; the run transcribes every audio member)")
    if report["limit"] is not None:
        beyond = "more rows follow, for a larger --limit" if report["rows_beyond_limit"] else "no rows follow"
        lines.append(f"--limit {report['limit']}: the first {report['limit']:,} rows of the manifests; {beyond}")
    rates = ", ".join(f"{rate} Hz x{count}" for rate, count in report["sample_rates"].items()) or "none"
    lines.append(f"audio: the start of {report['audio_checked']} sampled rows read, {report['audio_unreadable']} "
                 f"unreadable; sample rates {rates}")
    return lines


def dry_run_findings(report: dict[str, Any]) -> list[str]:
    """What a user should fix before the run: each row problem and unreadable file of the examples."""
    return [*report["row_problem_examples"], *report["audio_problem_examples"]]
