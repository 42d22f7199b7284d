"""The transcription job as a Ray Data plan: the one module that calls `ray.data`.

    manifest URIs -> ReadManifests (CPU actors) -> LoadAudio (CPU actors) -> TranscribeBatch (one GPU each, or
    fractional CPUs) -> FinishAndWrite (CPU actors; commits Parquet parts) -> summary rows -> the driver

Exactly once is loopscribe's own commit protocol (`pipeline/sink.py`), not Ray Data's checkpointing: parts are
content-addressed and atomic, a run skips the utterance ids already committed, and a final pass removes any
row two parts hold. It needs only the output folder, so a crashed driver, a dead actor retried by Ray, or a
rerun days later on another cluster all end with every row exactly once.

The driver reads nothing but manifest listings and the model's config (its sample rate): manifests are read
by `ReadManifests` actors, so a corpus of many large manifests streams instead of passing through the driver.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline import schema, sink, stages
from pipeline.config import TranscribeJobConfig
from pipeline.manifest import expand_manifest_uris
from pipeline.models import fetch_model, file_sha256, read_nemo_config, sample_rate_of

log = logging.getLogger(__name__)

READ_CPUS = 0.1  # manifest reading is I/O
AUDIO_ACTOR_CPUS = 0.25  # fetch + decode + resample: mostly I/O and libsndfile/soxr
FINISH_ACTOR_CPUS = 0.25  # detokenization and writes (CTC beam search takes more: see build_transcription)
AUDIO_BATCH_ROWS = 16


class JobError(ValueError):
    """A job that cannot run as configured: the message says why, for the user."""


class OutputMismatchError(JobError):
    """The output folder holds results made with another model or decoding."""


def check_output(config: TranscribeJobConfig) -> None:
    """Refuse to add rows to an output whose earlier rows were made by another model or decoding."""
    filesystem, root = sink._filesystem(config.output)
    path = f"{root.rstrip('/')}/{sink.CONFIG_FILE}"
    if not filesystem.exists(path):
        return
    with filesystem.open(path, "r") as handle:
        earlier = json.load(handle).get("identity")
    if earlier is not None and _differs(earlier, _jsonable(config.results_identity())):
        raise OutputMismatchError(
            f"{config.output} holds results of another model or decoding ({sink.CONFIG_FILE}: {earlier}); "
            "write to a new output, or delete this one to start over")


def _differs(earlier: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether two results identities differ in a setting both know (a setting added by a later version of
    loopscribe does not make an older output foreign)."""
    for section in set(earlier) & set(now):
        before, after = earlier[section] or {}, now[section] or {}
        if any(before[key] != after[key] for key in set(before) & set(after)):
            return True
    return False


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


def model_identity(config: TranscribeJobConfig) -> tuple[Path, str]:
    """The model file on this node and the id written in the `model` column: name and sha256 prefix."""
    path = fetch_model(config.model.uri, sha256=config.model.sha256, cache_dir=f"{config.model.cache_dir}/models")
    digest = config.model.sha256 or file_sha256(path)
    return path, f"{config.model.uri.rstrip('/').rsplit('/', 1)[-1]} sha256:{digest[:16]}"


def check_decoding_fits(nemo_config: dict[str, Any], config: TranscribeJobConfig) -> None:
    """Refuse, before any actor starts, a strategy the model's heads cannot run (from its `.nemo` config)."""
    has_transducer = "joint" in nemo_config
    has_ctc = "aux_ctc" in nemo_config or not has_transducer
    is_tdt = bool((nemo_config.get("model_defaults") or {}).get("tdt_durations"))
    strategy = config.decoding.strategy
    name = config.model.uri
    if config.decoding.head == "ctc" and not has_ctc:
        raise JobError(f"--decoding {strategy} needs a CTC head; {name} is a transducer without one")
    if config.decoding.head == "transducer" and strategy != "greedy" and not has_transducer:
        raise JobError(f"--decoding {strategy} needs a transducer head; {name} is CTC only (use greedy, "
                         "ctc_greedy or ctc_beam)")
    if strategy == "wind_beam" and is_tdt:
        raise JobError(f"--decoding wind_beam supports RNN-T only; {name} is TDT (use alsd or aes)")


def resolve_device(config: TranscribeJobConfig) -> str:
    import ray

    if config.resources.device != "auto":
        return config.resources.device
    return "cuda" if ray.cluster_resources().get("GPU", 0) > 0 else "cpu"


def read_rows(config: TranscribeJobConfig, manifest_uris: list[str], spare_cpus: float):
    """The manifests' rows not yet committed, as a dataset of blocks of `AUDIO_BATCH_ROWS` rows where it can.

    Ray Data merges everything a task yields into blocks of up to 128 MiB, so a manifest of a million rows
    would arrive as a few huge blocks: one audio actor would fetch all of its files while the others wait, and
    parts would be committed a thousand rows at a time. A streaming repartition splits the blocks, but it runs
    as tasks of one whole CPU, and Ray Data has no public way to ask for less. So it is added only when the
    cluster has a CPU to spare beyond what this job's actors reserve (any real cluster); on a 2-CPU machine
    whose actors hold 1.35 CPUs it would wait forever, and there one audio actor per manifest costs little.
    """
    import ray

    dataset = ray.data.from_items([{schema.MANIFEST: uri} for uri in manifest_uris])
    dataset = dataset.map_batches(
        stages.ReadManifests(sink.committed_ids(config.output), chunk_rows=AUDIO_BATCH_ROWS),
        batch_size=1, batch_format="pyarrow", num_cpus=READ_CPUS)
    if spare_cpus >= 1.0:
        return dataset.repartition(target_num_rows_per_block=AUDIO_BATCH_ROWS)
    # a warning on a cluster, where it costs parallelism; on one small machine (the quickstart) only a note
    level = logging.WARNING if sum(node["Alive"] for node in ray.nodes()) > 1 else logging.INFO
    log.log(level, "%.2f CPUs spare beyond the actors' reservations: manifest rows are not split into blocks of "
            "%d, so each manifest's audio is fetched by one actor and parts commit in bursts",
            max(spare_cpus, 0.0), AUDIO_BATCH_ROWS)
    return dataset


def build_transcription(config: TranscribeJobConfig, manifest_uris: list[str], sample_rate: int, device: str,
                        model_id: str):
    """The Ray Data plan of one job (lazy): a dataset of one summary row per committed part."""
    import ray
    from ray.data import ActorPoolStrategy

    resources = config.resources
    asr_cpus = resources.asr_actor_cpus or (1.0 if device == "cuda" else 0.5)
    # CTC beam search is real CPU work: a whole CPU per writer on a GPU cluster; on a CPU-only machine the ASR
    # actors share the same few cores, and a whole CPU more would leave none for the manifest reader
    finish_cpus = 1.0 if config.decoding.strategy == "ctc_beam" and device == "cuda" else FINISH_ACTOR_CPUS
    reserved_cpus = (READ_CPUS + asr_cpus * resources.gpu_actors + AUDIO_ACTOR_CPUS * resources.cpu_actors
                     + finish_cpus * resources.ctc_actors)
    dataset = read_rows(config, manifest_uris, ray.cluster_resources().get("CPU", 0.0) - reserved_cpus)
    dataset = dataset.map_batches(
        stages.LoadAudio, fn_constructor_kwargs={"sample_rate": sample_rate}, batch_format="pyarrow",
        batch_size=AUDIO_BATCH_ROWS, compute=ActorPoolStrategy(size=resources.cpu_actors),
        num_cpus=AUDIO_ACTOR_CPUS)
    dataset = dataset.map_batches(
        stages.TranscribeBatch,
        fn_constructor_kwargs={"model": config.model, "decoding": config.decoding, "resources": resources,
                               "device": device},
        batch_format="pyarrow", batch_size=resources.window_rows,
        compute=ActorPoolStrategy(size=resources.gpu_actors), num_cpus=asr_cpus,
        num_gpus=1 if device == "cuda" else 0)
    return dataset.map_batches(
        stages.FinishAndWrite,
        fn_constructor_kwargs={"model": config.model, "decoding": config.decoding, "output": config.output,
                               "model_id": model_id},
        batch_format="pyarrow", batch_size=resources.part_rows,
        compute=ActorPoolStrategy(size=resources.ctc_actors), num_cpus=finish_cpus)


def output_totals(output: str) -> dict[str, Any]:
    """Rows, outcomes and audio of everything committed under `output` (this run and earlier ones)."""
    table = sink.read_output(output, columns=[schema.STATUS])
    statuses = table.column(schema.STATUS).to_pylist()
    return {"rows": table.num_rows, "rows_ok": statuses.count(schema.STATUS_OK),
            "rows_error": statuses.count(schema.STATUS_ERROR)}


def print_progress(done: dict[str, Any]) -> None:
    print(f"loopscribe: committed {done['rows']} rows ({done['rows_error']} errors) in {done['parts']} parts, "
          f"{done['audio_hours'] * 3600:.1f} s of audio, {done['wall_s']:.0f} s", flush=True)


def run_transcription(config: TranscribeJobConfig,
                      progress: Callable[[dict[str, Any]], None] = print_progress) -> dict[str, Any]:
    """Run one job on the connected Ray cluster; returns the summary also written as `_summary.json`.

    `progress` is called with the running totals of this run (`stages.summarize`) after each committed part.
    """
    started = time.time()
    check_output(config)
    manifest_uris = expand_manifest_uris(config.manifests)
    model_path, model_id = model_identity(config)
    nemo_config = read_nemo_config(model_path)
    check_decoding_fits(nemo_config, config)
    sample_rate = sample_rate_of(nemo_config)
    device = resolve_device(config)
    sink.write_json(config.output, sink.CONFIG_FILE, {
        "config": config.to_dict(), "identity": config.results_identity(), "model_id": model_id,
        "device": device, "manifests": manifest_uris})
    log.info("%d manifest(s) -> %s (%s, %s)", len(manifest_uris), config.output, config.decoding.describe(), device)
    parts: list[dict[str, Any]] = []
    dataset = build_transcription(config, manifest_uris, sample_rate, device, model_id)
    for batch in dataset.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=0):
        for part in batch.to_pylist():
            parts.append(part)
            progress(stages.summarize(parts, started))
    removed = sink.deduplicate(config.output)
    summary = stages.summarize(parts, started)
    summary = {**output_totals(config.output), "this_run": summary, "duplicates_removed": removed,
               "model_id": model_id, "decoding": config.decoding.describe(), "device": device}
    sink.mark_success(config.output, summary)
    return summary
