"""One frozen configuration per transcription job: flags or a YAML file -> `TranscribeJobConfig` -> stages.

Defaults are written once, here. `jobs/transcribe.py` builds the config from its flags (or a YAML file whose
sections mirror these classes, with flags overriding it); each stage gets only its slice. The resolved config is
written beside the output (`_config.json`), so every result says how it was made, and a rerun into the same
output with a different model or decoding is refused instead of mixing two kinds of results.

The decoding section (`DecodingConfig`) and what each strategy does with it live in `pipeline/decoding/plan.py`.
Old names of settings (`gpu_actors`, `cpu_actors`, `ctc_actors`) are still read, as aliases of the new ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from pipeline.decoding import DecodingConfig
from pipeline.decoding import results_identity as decoding_identity
from pipeline.io import DEFAULT_CACHE_DIR
from pipeline.io.redact import redact_values
from pipeline.settings import check_settings, section, sections, setting

REPOSITORY = Path(__file__).resolve().parent.parent
BUNDLED_MODEL = REPOSITORY / "models" / "demo_hybrid_rnnt_ctc.nemo"
BUNDLED_TDT_MODEL = REPOSITORY / "models" / "demo_hybrid_tdt_ctc.nemo"  # the same model fine-tuned as TDT + CTC
BUNDLED_MANIFEST = REPOSITORY / "samples" / "manifest.json"


@dataclass(frozen=True)
class ModelConfig:
    uri: str = setting(str(BUNDLED_MODEL), "NeMo RNN-T, TDT, CTC or hybrid .nemo, path or URI", flag="--model",
                       metavar="URI", default_help=f"the bundled model, {BUNDLED_MODEL}")
    sha256: str | None = setting(None, "expected sha256 of the .nemo, checked before it is unpickled",
                                 flag="--model-sha256")
    cache_dir: str = setting(DEFAULT_CACHE_DIR, "node-local cache of remote models and LMs")

    def __post_init__(self) -> None:
        check_settings(self, "model")
        if not self.uri:
            raise ValueError("model.uri must name a .nemo file")


@dataclass(frozen=True)
class InputConfig:
    """How manifests and audio are read, and what one row may cost: a row past a bound is an error row, never an
    out-of-memory actor or a hung job."""

    glob: Literal["auto", "always", "never"] = setting(
        "auto", "read --manifest names as globs: auto: only where no file has that very name")
    read_timeout_s: float = setting(60.0, "seconds one audio file's read may take, retries included", above=0,
                                    finite=True)
    # transient: connection refused or lost, DNS, a backend's timeout, HTTP 429 and 5xx (pipeline/io/remote.py)
    read_retries: int = setting(
        4, "times a remote audio read that failed in a way that may pass (connection refused or lost, DNS, timeout, "
           "HTTP 429 or 5xx) is tried again, within --read-timeout-s, before its row is an error row; 0: never",
        minimum=0)
    read_retry_wait_s: float = setting(0.5, "seconds before the first retry of an audio read; each next one waits "
                                            "twice as long", above=0, finite=True)
    max_file_bytes: int = setting(2 << 30, "largest audio file read", above=0)
    max_row_duration_s: float = setting(3 * 3600.0, "most seconds of audio one row may decode to", above=0,
                                        finite=True)
    # an audio header claiming less is refused (it would decode to hours of samples)
    min_sample_rate: int = setting(1000, "lowest audio sample rate accepted", above=0)
    duration_tolerance_s: float = setting(
        0.25, "a manifest duration further than this from the measured one is counted in the summary", above=0,
        finite=True)
    # for manifests from others: not part of the output's identity, since it only makes rows error rows (a later run
    # with other roots and --retry-errors transcribes them); pipeline/io/uris.py::AudioRoots
    allowed_roots: tuple[str, ...] = setting(
        (), "local folders and URI prefixes (s3://bucket/audio/, https://host/audio/) audio may come from; a row whose "
            "audio lies elsewhere (local paths after resolving .. and links) is an error row naming this rule",
        metavar="ROOT", default_help="anywhere", checked=False)

    def __post_init__(self) -> None:
        check_settings(self, "input")
        roots = (self.allowed_roots,) if isinstance(self.allowed_roots, str) else tuple(self.allowed_roots)
        if not all(isinstance(root, str) and root for root in roots):
            raise ValueError(f"input.allowed_roots must be non-empty paths or URI prefixes, got {self.allowed_roots!r}")
        object.__setattr__(self, "allowed_roots", roots)


@dataclass(frozen=True)
class ResourcesConfig:
    device: Literal["auto", "cpu", "cuda"] = setting(
        "auto", "where the ASR actors run; auto: cuda when the cluster has GPUs")
    asr_actors: int = setting(1, "encoder + decoding actors, one GPU each (on the CPU: fractional CPUs)", minimum=1,
                              hidden_aliases=("--gpu-actors",))
    audio_actors: int = setting(2, "audio fetch/decode actors", minimum=1, hidden_aliases=("--cpu-actors",))
    writer_actors: int = setting(1, "CPU actors for CTC beam search, detokenization and writing", minimum=1,
                                 hidden_aliases=("--ctc-actors",))
    # the length bucketing bounds; with the model's memory model (pipeline/model/memory.py) they size each batch
    batch_audio_s: float | None = setting(
        None, "padded audio seconds per encoder batch", above=0, finite=True,
        default_help="as many as the ASR actor's memory holds for the model, at most 300 on a CPU")
    max_batch_size: int = setting(64, "utterances per encoder batch", minimum=1)
    asr_memory_gb: float | None = setting(
        None, "GiB an ASR actor's encoder batches may take beyond the model's weights; batches, and the longest "
              "piece of a row decoded whole (longer rows are cut into chunks), are sized to fit", above=0,
        finite=True, default_help="0.9 of the GPU's free memory once the model is loaded; on a CPU 0.4 of the node's "
                                  "available memory, shared among the ASR actors it can hold")
    # the streaming window
    window_rows: int = setting(1024, "rows each ASR call buckets by length", minimum=1)
    # a window's rows make about one part: 4x fewer parts than 256 at a million rows (docs/benchmarks.md, "A million
    # rows": readers pay per part), and no decoded row waits for a second window to fill its part
    part_rows: int = setting(1024, "rows per Parquet part", minimum=1)
    asr_actor_cpus: float | None = setting(None, "CPUs reserved per ASR actor", above=0, finite=True,
                                           default_help="1 with a GPU, 0.5 without")
    torch_threads: int | None = setting(None, "torch threads per ASR actor on the CPU", minimum=1,
                                        default_help="torch's default")
    # Ray's workers start at niceness 15, the floor is 19: on a node's busy cores the ASR actor, which sets the job's
    # pace, runs first (docs/benchmarks.md)
    side_stage_nice: int = setting(
        4, "steps of niceness the audio and writer actors run below the ASR actor, so that it runs first on busy "
           "cores; 0: all alike", minimum=0, maximum=19)

    def __post_init__(self) -> None:
        check_settings(self, "resources")


@dataclass(frozen=True)
class LongAudioConfig:
    """How a long recording is decoded (`pipeline/stages/chunks.py`): a row longer than `chunk_s` is cut, as `segment`
    says, into the speech segments of a voice-activity model (`pipeline/stages/segments.py`: the `vad_*`,
    `min_*`, `speech_pad_s` and `max_speech_s` settings; non-speech is not decoded) or into chunks of
    at most `chunk_s` seconds, at its pauses where it has them and else overlapping by `overlap_s`, decoded in the
    same batches as short rows and merged back into one row; with `attention = "local"` the encoder attends
    `local_context` frames each side (NeMo's `rel_pos_local_attn`) instead of the whole input. Measured in
    `benchmarks/long_audio.py` (docs/long_audio.md): chunks beat local attention on the bundled model."""

    chunk_s: float = setting(
        30.0, "rows longer than this are decoded in chunks of this many seconds; 0: never (the encoder's memory then "
              "grows with the row)", minimum=0, finite=True)
    overlap_s: float = setting(4.0, "seconds each chunk overlaps the next", flag="--chunk-overlap-s", minimum=0,
                               finite=True)
    attention: Literal["full", "local"] = setting(
        "full", "encoder self-attention: full, or local (NeMo's rel_pos_local_attn; Conformer models)")
    local_context: int = setting(128, "encoder frames each side that local attention sees", minimum=1)
    # how rows longer than chunk_s are cut (docs/long_audio.md): speech segments of a voice-activity model (silero-vad,
    # pipeline/io/vad.py; the non-speech between them is never decoded), chunks at energy pauses, or blind chunks.
    # The VAD's defaults are silero's own (get_speech_timestamps); measured in benchmarks/long_audio.py
    segment: Literal["vad", "pauses", "none", "auto"] = setting(
        "vad", "how rows longer than --chunk-s are cut: vad: speech segments of Silero VAD, non-speech not decoded; "
               "pauses: chunks at energy pauses, nothing dropped; none: chunks of --chunk-s with --chunk-overlap-s, no "
               "pause search; auto: vad, or pauses (said once) where the VAD model cannot load")
    vad_threshold: float = setting(0.5, "speech probability a VAD window needs to start speech (it ends below this "
                                        "less 0.15)", above=0, maximum=0.99, finite=True)
    min_speech_s: float = setting(0.25, "VAD speech of at most this many seconds is dropped", minimum=0, finite=True)
    min_silence_s: float = setting(0.1, "VAD silence shorter than this does not end a segment (shorter gaps are "
                                        "merged)", minimum=0, finite=True)
    speech_pad_s: float = setting(0.03, "seconds of audio kept each side of a VAD segment", minimum=0, finite=True)
    max_speech_s: float = setting(20.0, "longest VAD segment (--chunk-s where that is shorter: a segment is decoded "
                                        "as one chunk); a longer one is cut at its quietest point", above=1,
                                  finite=True)

    def __post_init__(self) -> None:
        check_settings(self, "long_audio")
        if self.chunk_s and not self.overlap_s < self.chunk_s / 2:
            raise ValueError(f"long_audio.overlap_s must be less than half of chunk_s ({self.chunk_s:g}), got "
                             f"{self.overlap_s:g}")


# settings renamed, still read under their old names in YAML (flags: each setting's hidden_aliases): old -> new
RESOURCE_ALIASES = {"gpu_actors": "asr_actors", "cpu_actors": "audio_actors", "ctc_actors": "writer_actors"}


@dataclass(frozen=True)
class TranscribeJobConfig:
    manifests: tuple[str, ...] = setting(
        (str(BUNDLED_MANIFEST),), "NeMo JSON-lines or Lhotse cut manifests (.jsonl[.gz]): paths, fsspec URIs or globs; "
        "or a sharded corpus (docs/shards.md): a NeMo tarred set's folder or metadata.yaml (or its manifest, with "
        "--tarred-audio), a Lhotse Shar folder or its cuts.NNNNNN.jsonl.gz files, WebDataset .tar URLs; brace ranges "
        "({0..127} or _OP_0..127_CL_) expand", flag="--manifest", metavar="URI",
        default_help=f"the bundled samples, {BUNDLED_MANIFEST}", checked=False, group="input and output")
    # pipeline/io/shards.py; not part of the output's identity (rows are named by their shard and member)
    tarred_audio: tuple[str, ...] = setting(
        (), "the shards of the NeMo tarred manifests --manifest names (NeMo's tarred_audio_filepaths): .tar URIs, "
            "brace ranges allowed (audio_{0..127}.tar or audio__OP_0..127_CL_.tar)", flag="--tarred-audio",
        metavar="URI", default_help="none: --manifest names loose manifests or a corpus folder", checked=False,
        group="input and output")
    output: str = setting("transcripts", "folder or URI for the Parquet parts, _config.json, _summary.json and "
                                         "_SUCCESS", group="input and output")
    model: ModelConfig = section("model", ModelConfig)
    decoding: DecodingConfig = section("decoding", DecodingConfig)
    input: InputConfig = section("input bounds (a row past one is an error row)", InputConfig)
    resources: ResourcesConfig = section("resources", ResourcesConfig)
    long_audio: LongAudioConfig = section(
        "long recordings (cut into speech segments or chunks, merged back into one row)", LongAudioConfig)
    ray_address: str | None = setting(
        None, "cluster to join", default_help="RAY_ADDRESS, as `ray job submit` sets it, else a new local Ray on "
                                              "127.0.0.1", group="ray")
    # a rerun transcribes again the rows earlier runs committed as error rows (a file that could not be read then)
    retry_errors: bool = setting(
        False, "transcribe again the rows an earlier run into the same --output committed as error rows (audio that "
               "could not be read then, say); the new row replaces the error row", group="input and output")
    # neither is part of the output's identity: they choose which rows a run writes, not how a row is made
    limit: int | None = setting(
        None, "transcribe at most the first N rows of the manifests, in order (the rows already committed among them "
              "are skipped); the same command with a larger N continues", minimum=1, metavar="N",
        default_help="every row", group="input and output")
    dry_run: bool = setting(
        False, "check without transcribing: plan the decoding, read every manifest line, read the start of a sample "
               "of the audio, print the totals; no Ray, nothing written", group="input and output")
    # not part of the output's identity: what is made from the rows once the job ends (pipeline/exports/, checked by
    # its ExportConfig); the choices are pipeline/exports/formats.py's FORMATS (tests/jobs/test_export.py compares)
    export: tuple[str, ...] = setting(
        (), "when the job ends, export the transcripts as these formats (jobs/export.py; docs/exports.md)",
        choices=("srt", "vtt", "txt", "nemo", "ctm"), checked=False, group="input and output")
    export_to: str | None = setting(None, "folder or URI for --export, a folder per format", metavar="URI",
                                    default_help="OUTPUT/_exports", group="input and output")

    def __post_init__(self) -> None:
        check_settings(self)
        if isinstance(self.export, (str, list)):  # a YAML or JSON list, or one format
            object.__setattr__(self, "export", (self.export,) if isinstance(self.export, str) else tuple(self.export))
        if isinstance(self.tarred_audio, (str, list)):
            object.__setattr__(self, "tarred_audio", (self.tarred_audio,) if isinstance(self.tarred_audio, str)
                               else tuple(self.tarred_audio))
        if isinstance(self.manifests, (str, list)):
            object.__setattr__(self, "manifests", (self.manifests,) if isinstance(self.manifests, str)
                               else tuple(self.manifests))
        if not self.manifests:
            raise ValueError("at least one manifest is needed")
        if not self.output:
            raise ValueError("output must name a folder or URI")

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain data, with credentials out of every URI (`pipeline/io/redact.py`)."""
        return redact_values(dataclasses.asdict(self))

    def results_identity(self) -> dict[str, Any]:
        """What makes two runs' rows the same kind of result: rows of another identity must not be mixed in."""
        return redact_values({"model": dataclasses.asdict(self.model) | {"cache_dir": None},
                              "decoding": decoding_identity(self.decoding),
                              "long_audio": dataclasses.asdict(self.long_audio)})


def config_from_dict(values: dict[str, Any]) -> TranscribeJobConfig:
    """Nested dict (YAML or JSON: top-level keys plus model/decoding/resources sections) -> config.

    Unknown keys are errors naming the key, so a typo never silently falls back to a default.
    """
    values = with_current_names(values)
    top_level = {f.name for f in fields(TranscribeJobConfig)}
    unknown = sorted(set(values) - top_level)
    if unknown:
        raise ValueError(f"unknown config keys: {', '.join(unknown)} (known: {', '.join(sorted(top_level))})")
    for name, (_, section_class) in sections(TranscribeJobConfig).items():
        given = values.get(name)
        if given is None:
            continue
        if isinstance(given, section_class):
            continue
        if not isinstance(given, dict):
            raise ValueError(f"config section {name!r} must be a mapping, got {type(given).__name__}")
        known = {f.name for f in fields(section_class)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ValueError(f"unknown keys in {name}: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        values[name] = section_class(**given)
    if "manifests" in values and isinstance(values["manifests"], list):
        values["manifests"] = tuple(values["manifests"])
    return TranscribeJobConfig(**values)


def config_from_flags(yaml_path: str | None, overrides: dict[str, Any]) -> TranscribeJobConfig:
    """A job's config: the YAML file's settings (if any), with the flags given (`overrides`, None: not given) on top.
    A bad file or setting raises ValueError naming it."""
    base: dict[str, Any] = {}
    if yaml_path:
        import yaml

        with open(yaml_path, encoding="utf-8") as handle:
            base = yaml.safe_load(handle) or {}
        if not isinstance(base, dict):
            raise ValueError(f"{yaml_path}: expected a mapping of settings")
    return config_from_dict(merge(with_current_names(base), overrides))


def with_current_names(values: dict[str, Any]) -> dict[str, Any]:
    """A nested settings dict with renamed settings under their current names (`RESOURCE_ALIASES`); both names
    of one setting at once is an error."""
    resources = values.get("resources")
    if not isinstance(resources, dict) or not set(resources) & set(RESOURCE_ALIASES):
        return dict(values)
    renamed = dict(resources)
    for old, new in RESOURCE_ALIASES.items():
        if old in renamed:
            if new in renamed:
                raise ValueError(f"resources.{old} is the old name of resources.{new}: give one of them")
            renamed[new] = renamed.pop(old)
    return {**values, "resources": renamed}


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Nested dict `overrides` on top of `base` (None values in overrides leave base as it is)."""
    merged = dict(base)
    for key, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, dict):
            merged[key] = merge(merged[key] if isinstance(merged.get(key), dict) else {}, value)
        else:
            merged[key] = value
    return merged
