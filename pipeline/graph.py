"""The transcription job as a Ray Data plan: the one module that calls `ray.data`.

    manifest URIs -> ReadManifests (CPU actors) -> LoadAudio (CPU actors) -> TranscribeBatch (one GPU each, or
    fractional CPUs) -> FinishAndWrite (CPU actors; commits Parquet parts) -> summary rows -> the driver

Exactly once is loopscribe's own commit protocol (`pipeline/io/sink.py`), not Ray Data's checkpointing: parts are
content-addressed and atomic, a run skips the utterance ids already committed, and a final pass removes any
row two parts hold. It needs only the output folder, so a crashed driver, a dead actor retried by Ray, or a
rerun days later on another cluster all end with every row exactly once.

The driver reads nothing but manifest listings and the model's config (its sample rate): manifests are read
by `ReadManifests` actors, so a corpus of many large manifests streams instead of passing through the driver.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline import schema
from pipeline.config import TranscribeJobConfig
from pipeline.decoding import DecodingPlan
from pipeline.io import cached_sha256, claim, expand_manifest_uris, models_dir, read_manifest, sink, sniff_manifest
from pipeline.io.redact import redact, redact_values
from pipeline.io.shards import ShardListing, ShardsError, sharded_corpus
from pipeline.io.uris import AudioRoots
from pipeline.model import ModelFacts, ModelLoadError, fetch_model, read_model_facts
from pipeline.preflight import PreflightError, asr_device, plan_job
from pipeline.progress import Progress
from pipeline.stages import FinishAndWrite, LoadAudio, ReadManifests, RunTotals, TranscribeBatch
from pipeline.stages.read import LISTING, ReadShards
from pipeline.stages.shards import LoadShards
from pipeline.totals import count_rows

log = logging.getLogger(__name__)

SNIFF_THREADS = 16  # manifests looked at once before the job starts (object stores: one request each)
SHOWN_EXAMPLES = 5  # problems, ids and rows the job names of each kind of finding


class JobError(ValueError):
    """A job that cannot run as configured: the message says why, for the user."""


class OutputMismatchError(JobError):
    """The output folder holds results made with another model or decoding."""


def output_identity(config: TranscribeJobConfig, model_sha256: str | None) -> dict[str, Any]:
    """What the output's claim records: `config.results_identity()` with the model named by its content,
    `model.content_sha256` (a file replaced at the same path is another model), and not by the sha256 a user
    pinned (the same content, pinned or not, is the same model). Without `model_sha256` (before the model is
    fetched) the model's content is left out, and `claim.check_identity` compares the rest."""
    identity = config.results_identity()
    model = {key: value for key, value in identity["model"].items() if key not in ("sha256", "cache_dir")}
    if model_sha256 is not None:
        model["content_sha256"] = model_sha256
    return {**identity, "model": model}


def check_output(config: TranscribeJobConfig) -> None:
    """Refuse, before the model is fetched, to add rows to an output claimed for another decoding or model URI
    (the model's content is compared when the output is claimed, `claim_output`)."""
    try:
        claim.check_identity(config.output, output_identity(config, None))
    except claim.IdentityMismatch as error:
        raise OutputMismatchError(str(error)) from None


def claim_output(config: TranscribeJobConfig, model_sha256: str) -> None:
    """Claim the output for this job's results before any work (`claim.claim_output`, atomic: of two jobs of
    different identities started together, one is refused here with the setting that differs, before it writes
    anything), then mark it incomplete until this run's `_SUCCESS`."""
    try:
        claim.claim_output(config.output, output_identity(config, model_sha256))
    except claim.IdentityMismatch as error:
        raise OutputMismatchError(str(error)) from None
    sink.mark_incomplete(config.output)


@dataclasses.dataclass(frozen=True)
class ModelIdentity:
    path: Path  # the model file on this node
    sha256: str  # of its content: hashed once per fetch (a local file once per version, `cached_sha256`)
    model_id: str  # what the `model` column says: the file's name and the sha256's first 16 digits


def model_identity(config: TranscribeJobConfig) -> ModelIdentity:
    """The model file on this node, the sha256 of its content and the id written in the `model` column."""
    try:
        path = fetch_model(config.model)
        digest = cached_sha256(path, models_dir(config.model.cache_dir))
    except Exception as error:  # fsspec backends raise their own types (botocore, gcsfs, aiohttp ...)
        raise JobError(redact(f"cannot fetch the model {config.model.uri}: {type(error).__name__}: {error}")) \
            from None
    return ModelIdentity(path, digest, f"{config.model.uri.rstrip('/').rsplit('/', 1)[-1]} sha256:{digest[:16]}")


def pinned_to(config: TranscribeJobConfig, model_sha256: str) -> TranscribeJobConfig:
    """The config the stages get: the model pinned to the content the output was claimed with, so that an actor
    never loads a file replaced at the model's path after the job started (its load fails, naming both sha256s)."""
    return dataclasses.replace(config, model=dataclasses.replace(config.model, sha256=model_sha256))


def plan_job_decoding(facts: ModelFacts, config: TranscribeJobConfig, device: str) -> DecodingPlan:
    """The job's decoding plan, from the facts of the model's `.nemo` config, made before any actor starts
    (`pipeline/preflight.py::plan_job`, as the jobs plan with a local model before Ray starts): a strategy or a
    long-audio attention the model cannot run is refused here, as a `JobError`."""
    try:
        return plan_job(facts, config, device)
    except ValueError as error:  # a DecodingError is one
        raise JobError(str(error)) from None


def connect_ray(address: str | None) -> bool:
    """Join the Ray cluster at `address`, else RAY_ADDRESS (set by `ray job submit`), else start a private local
    Ray on loopback only; nothing if this process is connected already. True where it started a private Ray (which
    `ray.shutdown()` stops, with every process of it)."""
    import os

    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
    else:
        # Ray 2.60 turns token authentication on for a local instance and warns that it did, on every start: that
        # one line is dropped (setting RAY_AUTH_MODE=token instead made the driver lose its own token)
        logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(
            lambda record: "Token authentication is enabled" not in record.getMessage())
        ray.init(include_dashboard=False, _node_ip_address="127.0.0.1", logging_level=logging.WARNING)
    quiet_ray_data()
    return not address


def quiet_ray_data() -> None:
    """Ray's own lines off the console, warnings and errors kept: Ray Data's per-operator progress (INFO, every few
    seconds; the jobs print their own progress line per committed part) and its advice that an actor pool got
    fewer input blocks than actors (a small manifest) still go to `ray-data.log` in the session directory, and so
    do its issue detector's warnings, every 30 s, that a stage's workers use more memory than they reserve (the
    stage actors hold torch and the model; nothing a user of these jobs sets)."""
    import warnings

    import ray.data  # noqa: F401  (configures the `ray.data` logger, which this then adjusts)

    for handler in logging.getLogger("ray.data").handlers:
        if not isinstance(handler, logging.FileHandler) and type(handler).__name__ != "SessionFileHandler":
            handler.setLevel(logging.WARNING)
            handler.addFilter(_not_issue_detection)
    warnings.filterwarnings("ignore", message="The minimum number of concurrent actors", category=UserWarning)


def _not_issue_detection(record: logging.LogRecord) -> bool:
    return "issue_detect" not in record.pathname


# what Ray's C++ core worker in the driver writes on stderr at error level that is no user's to act on: one line per
# Ray Data actor pool, about Ray Data's own map workers (ray-project/ray#57733)
RAY_CORE_NOTICES = (b"has constructor arguments in the object store and max_restarts > 0",)


@contextlib.contextmanager
def without_ray_core_notices(notices: tuple[bytes, ...] = RAY_CORE_NOTICES) -> Iterator[None]:
    """While the job runs, this process's stderr (file descriptor 2, which Ray's C++ logging writes to) passes
    through a thread that drops the lines holding one of `notices` and forwards every other line at once. The
    notices still reach Ray's log folder (`python-core-driver-*.log`). Stderr is restored on the way out, whatever
    ends the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward() -> None:
        with contextlib.suppress(OSError, ValueError), os.fdopen(read_end, "rb", buffering=0) as source:
            for line in iter(source.readline, b""):
                if not any(notice in line for notice in notices):
                    os.write(saved, line)

    pump = threading.Thread(target=forward, name="stderr-filter", daemon=True)
    pump.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last writer closed: the pump reads to its end and stops
        pump.join(timeout=5.0)
        if not pump.is_alive():
            os.close(saved)


def resolve_device(config: TranscribeJobConfig) -> str:
    """The ASR actors' device on the connected cluster (`pipeline/preflight.py::asr_device`): GPUs asked of a
    cluster that has none and can get none are refused here, as a `JobError`, before any actor starts."""
    import ray

    try:
        return asr_device(config.resources.device, ray.cluster_resources().get("GPU", 0), autoscaler_gpus())
    except PreflightError as error:
        raise JobError(str(error)) from None


def autoscaler_gpus() -> float:
    """GPUs the cluster's autoscaler may add (its node types' GPUs times their most nodes; Ray Data reads the same
    figure), 0 where there is no autoscaler (a local Ray, a fixed cluster) or Ray cannot say."""
    try:
        from ray._private.state import state

        return float((state.get_max_resources_from_cluster_config() or {}).get("GPU", 0))
    except Exception:  # noqa: BLE001  (a private API: whatever it raises means "cannot say")
        return 0.0


def read_rows(config: TranscribeJobConfig, manifest_uris: list[str], spare_cpus: float,
              row_limits: dict[str, int] | None = None):
    """The manifests' rows not yet committed, as a dataset of blocks of `LoadAudio.BATCH_ROWS` rows where it can.

    Ray Data merges everything a task yields into blocks of up to 128 MiB, so a manifest of a million rows
    would arrive as a few huge blocks: one audio actor would fetch all of its files while the others wait, and
    parts would be committed a thousand rows at a time. A streaming repartition splits the blocks, but it runs
    as tasks of one whole CPU, and Ray Data has no public way to ask for less. So it is added only where some
    node is sure to keep a whole CPU free beyond what this job's actors reserve, wherever Ray places them: when
    the CPUs to spare are at least as many as the nodes (any real cluster; less, each node's spare could be a
    fraction, as on two 1-CPU nodes with 1 CPU to spare). On a 2-CPU machine whose actors hold 1.25 CPUs it would
    wait forever, and there one audio actor per manifest costs little.
    """
    import ray
    from ray.data import TaskPoolStrategy

    dataset = ray.data.from_items([{schema.MANIFEST: uri} for uri in manifest_uris])
    dataset = dataset.map_batches(
        ReadManifests(sink.committed_ids(config.output, ok_only=config.retry_errors), chunk_rows=LoadAudio.BATCH_ROWS,
                      row_limits=row_limits, allowed_roots=AudioRoots(config.input.allowed_roots)),
        batch_size=1, batch_format="pyarrow", num_cpus=ReadManifests.CPUS,
        compute=TaskPoolStrategy(size=max(1, min(ReadManifests.MAX_TASKS, len(manifest_uris)))))
    nodes = sum(1 for node in ray.nodes() if node["Alive"])
    if spare_cpus >= max(1, nodes):
        return dataset.repartition(target_num_rows_per_block=LoadAudio.BATCH_ROWS)
    # a warning on a cluster, where it costs parallelism; on one small machine (the quickstart) only a note
    level = logging.WARNING if nodes > 1 else logging.INFO
    log.log(level, "%.2f CPUs spare beyond the actors' reservations: manifest rows are not split into blocks of "
            "%d, so each manifest's audio is fetched by one actor and parts commit in bursts",
            max(spare_cpus, 0.0), LoadAudio.BATCH_ROWS)
    return dataset


def shard_listings(config: TranscribeJobConfig) -> list[ShardListing] | None:
    """The listings of the sharded corpus the job names (`pipeline/io/shards.py::sharded_corpus`), None where it
    names loose manifests; a corpus that cannot be read as named, or loose manifests beside shards, is refused as a
    `JobError`. Looked up once per process for the same names."""
    try:
        return _shard_listings(tuple(config.manifests), tuple(config.tarred_audio))
    except ShardsError as error:
        raise JobError(redact(str(error))) from None


@functools.lru_cache(maxsize=4)
def _shard_listings(manifests: tuple[str, ...], tarred_audio: tuple[str, ...]) -> list[ShardListing] | None:
    return sharded_corpus(manifests, tarred_audio)


def read_shard_tasks(config: TranscribeJobConfig, listings: list[ShardListing], spare_cpus: float,
                     committed: sink.IdSet):
    """A sharded corpus's shard tasks (`ReadShards`): a task per shard holding rows not yet committed, each its own
    block where a CPU is spare (as `read_rows` splits manifest rows), so that shards spread over the audio actors."""
    import ray
    from ray.data import TaskPoolStrategy

    dataset = ray.data.from_items([{LISTING: listing.to_json()} for listing in listings],
                                  override_num_blocks=max(1, len(listings)))
    dataset = dataset.map_batches(
        ReadShards(committed, allowed_roots=AudioRoots(config.input.allowed_roots)),
        batch_size=1, batch_format="pyarrow", num_cpus=ReadShards.CPUS,
        compute=TaskPoolStrategy(size=max(1, min(ReadShards.MAX_TASKS, len(listings)))))
    nodes = sum(1 for node in ray.nodes() if node["Alive"])
    return dataset.repartition(target_num_rows_per_block=1) if spare_cpus >= max(1, nodes) else dataset


def build_transcription(config: TranscribeJobConfig, plan: DecodingPlan, manifest_uris: list[str],
                        sample_rate: int, model_id: str, row_limits: dict[str, int] | None = None,
                        listings: list[ShardListing] | None = None):
    """The Ray Data plan of one job (lazy): a dataset of one summary row per committed part. What each stage's
    workers reserve is the stage class's to say; how many of them run, the job's `resources`. `row_limits`
    (`first_rows`): the rows of each manifest read, where not all. `listings` (`shard_listings`): a sharded
    corpus, read a shard per call by `ReadShards` and `LoadShards` in place of `ReadManifests` and `LoadAudio`."""
    import ray
    from ray.data import ActorPoolStrategy

    resources = config.resources
    asr_cpus = TranscribeBatch.cpus(resources, plan.device)
    finish_cpus = FinishAndWrite.cpus(plan)
    reserved_cpus = (ReadManifests.CPUS + asr_cpus * resources.asr_actors + LoadAudio.CPUS * resources.audio_actors
                     + finish_cpus * resources.writer_actors)
    spare_cpus = ray.cluster_resources().get("CPU", 0.0) - reserved_cpus
    if listings is not None:
        committed = sink.committed_ids(config.output, ok_only=config.retry_errors)  # read once, for both stages
        dataset = read_shard_tasks(config, listings, spare_cpus, committed)
        dataset = dataset.map_batches(
            LoadShards, fn_constructor_kwargs={
                "sample_rate": sample_rate, "limits": config.input, "long_audio": config.long_audio,
                "committed": committed,
                "nice_steps": resources.side_stage_nice},
            batch_format="pyarrow", batch_size=1, compute=ActorPoolStrategy(size=resources.audio_actors),
            num_cpus=LoadShards.CPUS)
    else:
        dataset = read_rows(config, manifest_uris, spare_cpus, row_limits)
        dataset = dataset.map_batches(
            LoadAudio, fn_constructor_kwargs={"sample_rate": sample_rate, "limits": config.input,
                                              "long_audio": config.long_audio,
                                              "nice_steps": resources.side_stage_nice},
            batch_format="pyarrow", batch_size=LoadAudio.BATCH_ROWS,
            compute=ActorPoolStrategy(size=resources.audio_actors), num_cpus=LoadAudio.CPUS)
    dataset = dataset.map_batches(
        TranscribeBatch,
        fn_constructor_kwargs={"model": config.model, "plan": plan, "resources": resources,
                               "long_audio": config.long_audio, "limits": config.input},
        batch_format="pyarrow", batch_size=resources.window_rows,
        compute=ActorPoolStrategy(size=resources.asr_actors), num_cpus=asr_cpus,
        num_gpus=TranscribeBatch.gpus(plan.device))
    return dataset.map_batches(
        FinishAndWrite,
        fn_constructor_kwargs={"model": config.model, "plan": plan, "output": config.output, "model_id": model_id,
                               "nice_steps": resources.side_stage_nice},
        batch_format="pyarrow", batch_size=resources.part_rows,
        compute=ActorPoolStrategy(size=resources.writer_actors), num_cpus=finish_cpus)


def stage_error(error: BaseException) -> str | None:
    """The message of a `ModelLoadError` or `sink.PartWriteError` a stage raised (what the user must fix: the
    model, or the output's storage), found in the chain of exceptions Ray wraps it in (Ray keeps an actor's
    traceback only as text: the marker line is read from it there)."""
    kinds = (ModelLoadError, sink.PartWriteError)
    markers = [f"{kind.__module__}.{kind.__qualname__}: " for kind in kinds]
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kinds):
            return str(error)
        for line in str(error).splitlines():
            for marker in markers:
                if line.startswith(marker):
                    return line[len(marker):]
        seen.add(id(error))
        error = getattr(error, "cause", None) or error.__cause__ or error.__context__  # RayTaskError.cause
    return None


def output_totals(output: str, duration_tolerance_s: float) -> dict[str, Any]:
    """Rows and outcomes of everything committed under `output` (this run and earlier ones), and what a user
    should look at: manifest ids given to more than one utterance (both kept), and rows whose manifest
    `duration` differs from their audio by more than `duration_tolerance_s` (`duration_mismatches`, both ways).

    Both ways: a duration longer than the audio decoded (the file ends before it); and one shorter than the file,
    where the row stands for a whole file, that is, it starts at 0 and no other row names its file and channel
    (`durations_shorter_than_audio`: only the manifest's duration was transcribed; a segment of a recording that
    other rows cut too is not compared with the whole). Counted in Arrow: a million rows never become Python
    objects here."""
    table = sink.read_output(output, columns=[
        schema.STATUS, schema.SOURCE_ID, schema.MANIFEST, schema.LINE, schema.AUDIO_FILEPATH, schema.CHANNEL,
        schema.OFFSET, schema.DURATION, schema.AUDIO_DURATION, schema.FILE_DURATION], every_part=True)
    statuses = pc.value_counts(table.column(schema.STATUS)).to_pylist()
    by_status = {entry["values"]: entry["counts"] for entry in statuses}
    source_ids = pc.value_counts(table.column(schema.SOURCE_ID).drop_null())
    shared = sorted(source_ids.field("values").filter(pc.greater(source_ids.field("counts"), 1)).to_pylist())
    longer, shorter = duration_mismatches(table, duration_tolerance_s)
    longer_examples, shorter_examples = (duration_examples(table.filter(mask), kind)
                                         for mask, kind in ((longer, "longer"), (shorter, "shorter")))
    longer_count, shorter_count = (pc.sum(mask).as_py() or 0 for mask in (longer, shorter))
    return {"rows": table.num_rows, "rows_ok": by_status.get(schema.STATUS_OK, 0),
            "rows_error": by_status.get(schema.STATUS_ERROR, 0),
            "ids_given_to_several_utterances": len(shared), "ids_given_to_several_examples": shared[:SHOWN_EXAMPLES],
            "duration_mismatches": longer_count + shorter_count,
            "duration_mismatch_examples": [example for _, example in sorted(
                longer_examples + shorter_examples)][:SHOWN_EXAMPLES],
            "durations_shorter_than_audio": shorter_count,
            "durations_shorter_examples": [example for _, example in shorter_examples]}


def duration_mismatches(table: pa.Table, tolerance_s: float) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """Rows of `table` (the output's, `output_totals`) whose manifest duration is longer than the audio decoded,
    and rows standing for a whole file whose duration is shorter than the file, by more than `tolerance_s`: two
    boolean masks."""
    given, decoded = table.column(schema.DURATION), table.column(schema.AUDIO_DURATION)
    whole = table.column(schema.FILE_DURATION)
    longer = pc.fill_null(pc.and_(pc.greater(given, 0), pc.greater(pc.abs(pc.subtract(given, decoded)), tolerance_s)),
                          False)
    shorter = pc.fill_null(pc.and_(pc.and_(pc.greater(given, 0), pc.equal(table.column(schema.OFFSET), 0)),
                                   pc.and_(pc.greater(pc.subtract(whole, given), tolerance_s), pc.invert(longer))),
                           False)
    if pc.any(shorter).as_py():  # a row that shares its file and channel with another is a segment, not the whole
        sources = pc.binary_join_element_wise(
            pc.fill_null(table.column(schema.AUDIO_FILEPATH), ""),
            pc.fill_null(pc.cast(table.column(schema.CHANNEL), pa.string()), ""), "\x00")
        counts = pc.value_counts(sources)
        shared = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
        shorter = pc.and_(shorter, pc.invert(pc.is_in(sources, value_set=shared)))
    return longer, shorter


def duration_examples(rows: pa.Table, kind: str) -> list[tuple[tuple[str, int], str]]:
    """The first `SHOWN_EXAMPLES` of `rows` (one kind of `duration_mismatches`: "longer" or "shorter") in manifest
    and line order, each as ((manifest, line), a line saying where and how it differs)."""
    first = rows.sort_by([(schema.MANIFEST, "ascending"), (schema.LINE, "ascending")]).slice(0, SHOWN_EXAMPLES)
    examples = []
    for row in first.select([schema.MANIFEST, schema.LINE, schema.DURATION, schema.AUDIO_DURATION,
                             schema.FILE_DURATION]).to_pylist():
        where = f"{row[schema.MANIFEST]}, line {row[schema.LINE]}: duration {row[schema.DURATION]:g} s"
        how = (f"measured {row[schema.AUDIO_DURATION]:.3f} s" if kind == "longer" else
               f"the file {row[schema.FILE_DURATION]:.3f} s (only {row[schema.DURATION]:g} s of it transcribed)")
        examples.append(((row[schema.MANIFEST] or "", row[schema.LINE] or 0), f"{where}, {how}"))
    return examples


@dataclasses.dataclass(frozen=True)
class FirstRows:
    """What a run with `--limit` reads: its manifests, and how many rows of each."""

    manifest_uris: list[str]  # the manifests that hold the first rows, in order
    row_limits: dict[str, int]  # manifest URI -> its rows within the limit (counted when the run started)
    rows_beyond: bool  # whether the manifests hold rows past the limit


def first_rows(manifest_uris: list[str], limit: int | None) -> FirstRows:
    """The first `limit` rows of the manifests in order (None: every row), counted as `ReadManifests` reads them: a
    non-blank line is a row, an unusable one too (an error row). The driver reads at most `limit` rows, one more,
    and the first row of each manifest past the limit. Rows already committed count: a rerun with the same limit
    finds nothing to do, and one with a larger limit continues where the last stopped."""
    if limit is None:
        return FirstRows(list(manifest_uris), {}, False)
    kept: list[str] = []
    row_limits: dict[str, int] = {}
    left = limit
    for index, uri in enumerate(manifest_uris):
        if left == 0:
            beyond = any(next(read_manifest(later), None) is not None for later in manifest_uris[index:])
            return FirstRows(kept, row_limits, beyond)
        rows = sum(1 for _ in itertools.islice(read_manifest(uri), left + 1))
        kept.append(uri)
        row_limits[uri] = min(rows, left)
        if rows > left:
            return FirstRows(kept, row_limits, True)
        left -= rows
    return FirstRows(kept, row_limits, False)


def expand_manifests(config: TranscribeJobConfig, warn: Callable[[str], None] = log.warning) -> list[str]:
    """The job's manifest URIs (globs expanded as `config.input.glob` says), each looked at once: a manifest that
    is empty, binary or broken is named through `warn` (its rows, if any, and one error row for a binary or
    broken one still come out), and a job none of whose manifests has a line is refused."""
    listings = shard_listings(config)
    if listings is not None:  # a sharded corpus: its listings (manifests, cuts files) or tars
        if not listings:
            raise JobError(f"nothing to transcribe: {', '.join(config.manifests)} holds no shard")
        return [listing.name for listing in listings]
    glob = {"auto": None, "always": True, "never": False}[config.input.glob]
    uris = expand_manifest_uris(config.manifests, glob=glob)
    with ThreadPoolExecutor(max_workers=min(SNIFF_THREADS, len(uris))) as pool:
        problems = [problem for problem in pool.map(sniff_manifest, uris) if problem]
    for problem in problems[:SHOWN_EXAMPLES]:
        warn(problem)
    if len(problems) > SHOWN_EXAMPLES:
        warn(f"... and {len(problems) - SHOWN_EXAMPLES} more manifests with problems")
    if len(problems) == len(uris):
        raise JobError(f"nothing to transcribe: no manifest of {', '.join(config.manifests)} has a usable line")
    return uris


def run_transcription(config: TranscribeJobConfig, progress: Callable[[dict[str, Any]], None] | None = None,
                      manifest_uris: list[str] | None = None) -> dict[str, Any]:
    """Run one job on the connected Ray cluster; returns the summary also written as `_summary.json`.

    `progress` is called with the running totals of this run (`RunTotals`) after each committed part; by default a
    `pipeline.progress.Progress` on stdout, whose total is counted from the manifests while the job starts.
    """
    started = time.time()
    check_output(config)
    device = resolve_device(config)  # GPUs the cluster cannot give are refused before the model is fetched
    manifest_uris = manifest_uris if manifest_uris is not None else expand_manifests(config)
    listings = shard_listings(config)
    if listings is not None and config.limit is not None:
        raise JobError("--limit reads the first rows of loose manifests; a sharded corpus is read a whole shard at a "
                       "time: name fewer shards instead (a shorter brace range)")
    first = first_rows(manifest_uris, config.limit) if listings is None else FirstRows([], {}, False)
    progress = Progress(asr_workers=config.resources.asr_actors) if progress is None else progress
    if isinstance(progress, Progress):
        progress.count_in_background(lambda: count_rows(
            first.manifest_uris, first.row_limits, sink.committed_ids(config.output, ok_only=config.retry_errors),
            AudioRoots(config.input.allowed_roots), listings))
    model = model_identity(config)
    model_id = model.model_id
    facts = read_model_facts(model.path)
    plan = plan_job_decoding(facts, config, device)
    claim_output(config, model.sha256)
    config = pinned_to(config, model.sha256)
    sink.write_json(config.output, sink.CONFIG_FILE, {
        "config": config.to_dict(), "identity": output_identity(config, model.sha256),
        "row_identity": schema.ROW_IDENTITY, "model_id": redact(model_id), "model_sha256": model.sha256,
        "device": device, "manifests": [redact(uri) for uri in manifest_uris]})
    log.info("%d manifest(s) -> %s (%s, %s)", len(manifest_uris), redact(config.output), plan.description, device)
    parts: list[dict[str, Any]] = []
    totals = RunTotals(started)
    dataset = build_transcription(config, plan, first.manifest_uris, facts.sample_rate, model_id, first.row_limits,
                                  listings)
    try:
        with without_ray_core_notices():
            for batch in dataset.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=0):
                for part in batch.to_pylist():
                    parts.append(part)
                    totals.add(part)
                    progress(totals.summary())
    except Exception as error:  # Ray wraps what an actor raised; a model or an output it cannot use is the user's
        cause = stage_error(error)
        if cause is None:
            raise
        raise JobError(redact(f"{cause} (rows committed before it stay committed; once it is fixed, the same "
                              "command finishes the rest)")) from None
    finally:
        if isinstance(progress, Progress):
            progress.close()
    deduplicated = sink.deduplicate(config.output)
    summary = totals.summary()
    summary = {**output_totals(config.output, config.input.duration_tolerance_s), "this_run": summary,
               "duplicates_removed": deduplicated.duplicates, "error_rows_replaced": deduplicated.errors_replaced,
               "repeats_differing": deduplicated.conflicting,
               "repeats_differing_examples": list(deduplicated.conflict_examples),
               "model_id": model_id, "model_sha256": model.sha256, "decoding": plan.description, "device": device,
               "limit": config.limit, "rows_beyond_limit": first.rows_beyond}
    summary = redact_values(summary)
    sink.mark_success(config.output, summary)
    from pipeline.reports.run import write_run_report

    return write_run_report(config, summary, parts, started)
