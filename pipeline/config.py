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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from pipeline.decoding.plan import DecodingConfig
from pipeline.decoding.plan import results_identity as decoding_identity
from pipeline.io.redact import redact_values

REPOSITORY = Path(__file__).resolve().parent.parent
BUNDLED_MODEL = REPOSITORY / "models" / "demo_hybrid_rnnt_ctc.nemo"
BUNDLED_TDT_MODEL = REPOSITORY / "models" / "demo_hybrid_tdt_ctc.nemo"  # the same model fine-tuned as TDT + CTC
BUNDLED_MANIFEST = REPOSITORY / "samples" / "manifest.json"
DEFAULT_CACHE_DIR = str(Path.home() / ".cache" / "loopscribe")


@dataclass(frozen=True)
class ModelConfig:
    uri: str = str(BUNDLED_MODEL)  # a .nemo path or fsspec URI
    sha256: str | None = None  # checked before anything is unpickled
    cache_dir: str = DEFAULT_CACHE_DIR  # node-local cache of remote models and LMs

    def __post_init__(self) -> None:
        if not self.uri:
            raise ValueError("model.uri must name a .nemo file")


@dataclass(frozen=True)
class InputConfig:
    """How manifests and audio are read, and what one row may cost: a row past a bound is an error row, never an
    out-of-memory actor or a hung job."""

    glob: Literal["auto", "always", "never"] = "auto"  # auto: a manifest name is a glob only where no such file is
    read_timeout_s: float = 60.0  # one audio file's read
    max_file_bytes: int = 2 << 30  # one audio file
    max_row_duration_s: float = 3 * 3600.0  # decoded audio of one row
    min_sample_rate: int = 1000  # an audio header claiming less is refused (it would decode to hours of samples)
    duration_tolerance_s: float = 0.25  # manifest `duration` vs measured `audio_duration`: counted past this

    def __post_init__(self) -> None:
        if self.glob not in ("auto", "always", "never"):
            raise ValueError(f"input.glob must be auto, always or never, got {self.glob!r}")
        for name in ("read_timeout_s", "max_file_bytes", "max_row_duration_s", "min_sample_rate",
                     "duration_tolerance_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"input.{name} must be a number > 0, got {value!r}")


@dataclass(frozen=True)
class ResourcesConfig:
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: cuda when the cluster has GPUs
    asr_actors: int = 1  # encoder + decoding actors; each holds one GPU (on the CPU: fractional CPUs)
    audio_actors: int = 2  # audio fetch + decode actors
    writer_actors: int = 1  # CPU actors for CTC beam search (ctc_beam), detokenization, timestamps and writing parts
    batch_audio_s: float = 300.0  # padded audio seconds per encoder batch (length bucketing bound)
    max_batch_size: int = 64  # utterances per encoder batch
    window_rows: int = 1024  # rows the ASR stage receives at once and buckets by length (the streaming window)
    part_rows: int = 256  # rows per committed Parquet part
    asr_actor_cpus: float | None = None  # CPUs reserved per ASR actor; None: 1 with a GPU, 0.5 without
    torch_threads: int | None = None  # torch threads per ASR actor on the CPU; None: torch's default
    side_stage_nice: int = 4  # steps of niceness (0-19) the audio and writer actors run below the ASR actor (Ray's
    # workers start at 15, the floor is 19): on a node's busy cores the ASR actor, which sets the job's pace, runs
    # first (docs/benchmarks.md); 0: all stages alike

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"resources.device must be auto, cpu or cuda, got {self.device!r}")
        for name in ("asr_actors", "audio_actors", "writer_actors", "max_batch_size", "window_rows", "part_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"resources.{name} must be >= 1, got {getattr(self, name)}")
        if not self.batch_audio_s > 0:
            raise ValueError(f"resources.batch_audio_s must be > 0, got {self.batch_audio_s}")
        if self.asr_actor_cpus is not None and not self.asr_actor_cpus > 0:
            raise ValueError(f"resources.asr_actor_cpus must be > 0, got {self.asr_actor_cpus}")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ValueError(f"resources.torch_threads must be >= 1, got {self.torch_threads}")
        if not 0 <= self.side_stage_nice <= 19:
            raise ValueError(f"resources.side_stage_nice must be 0-19 steps, got {self.side_stage_nice}")

    def asr_cpus(self, device: str) -> float:
        """CPUs reserved per ASR actor: a whole one beside a GPU; half of one where the actor itself is on a CPU
        (its torch threads use what the machine has)."""
        return self.asr_actor_cpus or (1.0 if device == "cuda" else 0.5)


@dataclass(frozen=True)
class LongAudioConfig:
    """How a long recording is decoded (`pipeline/stages/chunks.py`): a row longer than `chunk_s` is cut into chunks of
    at most `chunk_s` seconds, at its pauses where it has them and else overlapping by `overlap_s`, decoded in the
    same batches as short rows and merged back into one row; with `attention = "local"` the encoder attends
    `local_context` frames each side (NeMo's `rel_pos_local_attn`) instead of the whole input. Measured in
    `benchmarks/long_audio.py` (docs/long_audio.md): chunks beat local attention on the bundled model."""

    chunk_s: float = 30.0  # 0: never cut (a recording is encoded whole: memory grows with its length)
    overlap_s: float = 4.0
    attention: Literal["full", "local"] = "full"
    local_context: int = 128  # encoder frames each side, with attention = "local"

    def __post_init__(self) -> None:
        for name in ("chunk_s", "overlap_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise ValueError(f"long_audio.{name} must be a number >= 0, got {value!r}")
        if self.chunk_s and not self.overlap_s < self.chunk_s / 2:
            raise ValueError(f"long_audio.overlap_s must be less than half of chunk_s ({self.chunk_s:g}), got "
                             f"{self.overlap_s:g}")
        if self.attention not in ("full", "local"):
            raise ValueError(f"long_audio.attention must be full or local, got {self.attention!r}")
        if isinstance(self.local_context, bool) or not isinstance(self.local_context, int) or self.local_context < 1:
            raise ValueError(f"long_audio.local_context must be an integer >= 1, got {self.local_context!r}")


# settings renamed, still read under their old names (flags and YAML): old -> new
RESOURCE_ALIASES = {"gpu_actors": "asr_actors", "cpu_actors": "audio_actors", "ctc_actors": "writer_actors"}


@dataclass(frozen=True)
class TranscribeJobConfig:
    manifests: tuple[str, ...] = (str(BUNDLED_MANIFEST),)  # paths, URIs or globs
    output: str = "transcripts"  # a folder path or URI
    model: ModelConfig = field(default_factory=ModelConfig)
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    input: InputConfig = field(default_factory=InputConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    long_audio: LongAudioConfig = field(default_factory=LongAudioConfig)
    ray_address: str | None = None  # None: RAY_ADDRESS or a running cluster, else a new local one
    # a rerun transcribes again the rows earlier runs committed as error rows (a file that could not be read then)
    retry_errors: bool = False

    def __post_init__(self) -> None:
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


_SECTIONS = {"model": ModelConfig, "decoding": DecodingConfig, "input": InputConfig, "resources": ResourcesConfig,
             "long_audio": LongAudioConfig}


def config_from_dict(values: dict[str, Any]) -> TranscribeJobConfig:
    """Nested dict (YAML or JSON: top-level keys plus model/decoding/resources sections) -> config.

    Unknown keys are errors naming the key, so a typo never silently falls back to a default.
    """
    values = with_current_names(values)
    top_level = {f.name for f in fields(TranscribeJobConfig)}
    unknown = sorted(set(values) - top_level)
    if unknown:
        raise ValueError(f"unknown config keys: {', '.join(unknown)} (known: {', '.join(sorted(top_level))})")
    for section, section_class in _SECTIONS.items():
        given = values.get(section)
        if given is None:
            continue
        if isinstance(given, section_class):
            continue
        if not isinstance(given, dict):
            raise ValueError(f"config section {section!r} must be a mapping, got {type(given).__name__}")
        known = {f.name for f in fields(section_class)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ValueError(f"unknown keys in {section}: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        values[section] = section_class(**given)
    if "manifests" in values and isinstance(values["manifests"], list):
        values["manifests"] = tuple(values["manifests"])
    return TranscribeJobConfig(**values)


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
