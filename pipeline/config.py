"""One frozen configuration per transcription job: flags or a YAML file -> `TranscribeJobConfig` -> stages.

Defaults are written once, here. `jobs/transcribe.py` builds the config from its flags (or a YAML file whose
sections mirror these classes, with flags overriding it); each stage gets only its slice. The resolved config is
written beside the output (`_config.json`), so every result says how it was made, and a rerun into the same
output with a different model or decoding is refused instead of mixing two kinds of results.

Decoding strategies (`DecodingConfig.strategy`):
- `greedy`: label-looping greedy of the transducer head (RNN-T or TDT); CTC greedy for a CTC-only model.
- `wind_greedy`: label-looping greedy with WIND's window of `window_size` frames (same tokens as `greedy`).
- `alsd`, `aes`, `wind_beam`: ALSD++, AES++ and WIND beam search of width `beam_size` (transducer head).
- `ctc_greedy`: greedy decoding of the CTC head (of a CTC or hybrid model).
- `ctc_beam`: the GPU stage applies blank collapse (`ctc_collapse_threshold`) and hands compact CTC log-probs to
  a CPU stage that runs `CtcBeamSearch` of width `beam_size`.
Every strategy fuses the n-gram LM at `lm_uri` with weight `lm_weight` (NeMo's `ngram_lm_alpha`) when given.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

Strategy = Literal["greedy", "wind_greedy", "alsd", "aes", "wind_beam", "ctc_greedy", "ctc_beam"]
STRATEGIES: tuple[str, ...] = ("greedy", "wind_greedy", "alsd", "aes", "wind_beam", "ctc_greedy", "ctc_beam")
TRANSDUCER_STRATEGIES = ("greedy", "wind_greedy", "alsd", "aes", "wind_beam")
BEAM_STRATEGIES = ("alsd", "aes", "wind_beam", "ctc_beam")

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
class DecodingConfig:
    strategy: Strategy = "greedy"
    beam_size: int = 4
    max_symbols: int | None = None  # labels per frame (transducers); None: the checkpoint's own setting
    window_size: int = 8  # WIND frames (wind_greedy, wind_beam)
    lm_uri: str | None = None  # n-gram LM: a binary from `python -m decoders.ngram.build`, or a token-level ARPA
    lm_sha256: str | None = None
    lm_weight: float = 0.0  # shallow-fusion weight (NeMo's ngram_lm_alpha)
    pruning: Literal["early", "late"] = "late"  # transducer beam + LM
    blank_lm_scoring: Literal["none", "weighted"] = "weighted"  # transducer beam + LM
    # ctc_beam: blank collapse of frames whose p(blank) exceeds this; "weak": frames whose argmax is blank; None: off
    ctc_collapse_threshold: float | Literal["weak"] | None = 0.9
    ctc_insertion_bonus: float = 0.0  # ctc_beam: added per label
    ctc_beam_threshold: float = 20.0  # ctc_beam: drop candidates this far below the best
    use_cuda_graphs: bool = True  # transducer greedy and beam loops replay CUDA graphs on a GPU

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"decoding.strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.beam_size < 1:
            raise ValueError(f"decoding.beam_size must be >= 1, got {self.beam_size}")
        if self.max_symbols is not None and self.max_symbols < 1:
            raise ValueError(f"decoding.max_symbols must be >= 1, got {self.max_symbols}")
        if self.window_size < 1:
            raise ValueError(f"decoding.window_size must be >= 1, got {self.window_size}")
        if not math.isfinite(self.lm_weight) or self.lm_weight < 0:
            raise ValueError(f"decoding.lm_weight must be a finite number >= 0, got {self.lm_weight}")
        if self.lm_weight > 0 and not self.lm_uri:
            raise ValueError("decoding.lm_weight > 0 needs decoding.lm_uri (--lm)")
        if self.pruning not in ("early", "late"):
            raise ValueError(f"decoding.pruning must be 'early' or 'late', got {self.pruning!r}")
        if self.blank_lm_scoring not in ("none", "weighted"):
            raise ValueError(f"decoding.blank_lm_scoring must be 'none' or 'weighted', got {self.blank_lm_scoring!r}")
        threshold = self.ctc_collapse_threshold
        if threshold is not None and threshold != "weak" and not (
                isinstance(threshold, (int, float)) and 0.0 < threshold < 1.0):
            raise ValueError(f"decoding.ctc_collapse_threshold must lie in (0, 1), or be 'weak' or None: {threshold!r}")
        if not self.ctc_beam_threshold > 0:
            raise ValueError(f"decoding.ctc_beam_threshold must be > 0, got {self.ctc_beam_threshold}")

    @property
    def head(self) -> Literal["transducer", "ctc"]:
        return "ctc" if self.strategy.startswith("ctc_") else "transducer"

    def describe(self) -> str:
        """A short identifier of what decoded a row, for the `decoding` column."""
        parts = [self.strategy]
        if self.strategy in BEAM_STRATEGIES:
            parts.append(f"beam_size={self.beam_size}")
        if self.strategy in ("wind_greedy", "wind_beam"):
            parts.append(f"window_size={self.window_size}")
        if self.max_symbols is not None and self.head == "transducer":
            parts.append(f"max_symbols={self.max_symbols}")
        if self.strategy == "ctc_beam" and self.ctc_collapse_threshold is not None:
            parts.append(f"collapse={self.ctc_collapse_threshold}")
        if self.strategy == "ctc_beam":  # every other setting that changes the results, where not the default
            parts += [f"{name}={getattr(self, name):g}" for name in ("ctc_insertion_bonus", "ctc_beam_threshold")
                      if getattr(self, name) != _DECODING_DEFAULTS[name]]
        if self.lm_uri and self.lm_weight > 0:
            parts.append(f"lm={self.lm_uri}")
            parts.append(f"lm_weight={self.lm_weight:g}")
            if self.strategy in ("alsd", "aes", "wind_beam"):
                parts += [f"{name}={getattr(self, name)}" for name in ("pruning", "blank_lm_scoring")
                          if getattr(self, name) != _DECODING_DEFAULTS[name]]
        return " ".join(parts)


_DECODING_DEFAULTS = {f.name: f.default for f in fields(DecodingConfig)}


@dataclass(frozen=True)
class ResourcesConfig:
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: cuda when the cluster has GPUs
    gpu_actors: int = 1  # ASR actors; each holds one GPU (with device cpu: CPU actors doing the GPU stage's work)
    cpu_actors: int = 2  # audio fetch + decode actors
    ctc_actors: int = 1  # CPU actors for detokenization, word timestamps, CTC beam search and writing parts
    batch_audio_s: float = 300.0  # padded audio seconds per encoder batch (length bucketing bound)
    max_batch_size: int = 64  # utterances per encoder batch
    window_rows: int = 1024  # rows the ASR stage receives at once and buckets by length (the streaming window)
    part_rows: int = 256  # rows per committed Parquet part
    asr_actor_cpus: float | None = None  # CPUs reserved per ASR actor; None: 1 with a GPU, 0.5 without
    torch_threads: int | None = None  # torch threads per ASR actor on the CPU; None: torch's default

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"resources.device must be auto, cpu or cuda, got {self.device!r}")
        for name in ("gpu_actors", "cpu_actors", "ctc_actors", "max_batch_size", "window_rows", "part_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"resources.{name} must be >= 1, got {getattr(self, name)}")
        if not self.batch_audio_s > 0:
            raise ValueError(f"resources.batch_audio_s must be > 0, got {self.batch_audio_s}")
        if self.asr_actor_cpus is not None and not self.asr_actor_cpus > 0:
            raise ValueError(f"resources.asr_actor_cpus must be > 0, got {self.asr_actor_cpus}")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ValueError(f"resources.torch_threads must be >= 1, got {self.torch_threads}")


@dataclass(frozen=True)
class TranscribeJobConfig:
    manifests: tuple[str, ...] = (str(BUNDLED_MANIFEST),)  # paths, URIs or globs
    output: str = "transcripts"  # a folder path or URI
    model: ModelConfig = field(default_factory=ModelConfig)
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    ray_address: str | None = None  # None: RAY_ADDRESS or a running cluster, else a new local one

    def __post_init__(self) -> None:
        if isinstance(self.manifests, (str, list)):
            object.__setattr__(self, "manifests", (self.manifests,) if isinstance(self.manifests, str)
                               else tuple(self.manifests))
        if not self.manifests:
            raise ValueError("at least one manifest is needed")
        if not self.output:
            raise ValueError("output must name a folder or URI")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def results_identity(self) -> dict[str, Any]:
        """What makes two runs' rows the same kind of result: rows of another identity must not be mixed in."""
        return {"model": dataclasses.asdict(self.model) | {"cache_dir": None},
                "decoding": dataclasses.asdict(self.decoding) | {"use_cuda_graphs": None}}  # same results either way


_SECTIONS = {"model": ModelConfig, "decoding": DecodingConfig, "resources": ResourcesConfig}


def config_from_dict(values: dict[str, Any]) -> TranscribeJobConfig:
    """Nested dict (YAML or JSON: top-level keys plus model/decoding/resources sections) -> config.

    Unknown keys are errors naming the key, so a typo never silently falls back to a default.
    """
    values = dict(values)
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
