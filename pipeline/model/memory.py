"""How much memory an encoder batch takes, and the batches and chunk lengths that fit an ASR actor's budget.

Without gradients an encoder's layers run one after another, so its peak is that of its largest phase, not a sum
over layers, and it does not grow with depth (weights do). Two phases set it, per row of a batch padded to `S`
seconds:
- the convolutional subsampling, at the feature rate: `channels x features/2 x frames/2` floats (the first
  convolution's output beside the next one's), linear in `S`;
- a Conformer layer: its activations (`d_model x (2 + ff_expansion)` floats a frame, linear) plus, with full
  attention, `n_heads` score matrices of `T x T` and `T x 2T` (NeMo's relative-position attention keeps the
  unshifted, the shifted and the summed scores), quadratic in `S`; with local attention (`rel_pos_local_attn`)
  `n_heads x T x (2 w + 1)` instead, linear.
So `peak(B, S) = fixed + B x max(subsampling x S, layer x S + attention x S^2)` bytes beyond the weights
(`EncoderMemory`). The coefficients are the architecture's counts of floats times factors measured on the CPU
(peak RSS) on the demo model and the production shapes (`benchmarks/encoder_memory.py`; docs/memory.md);
published measurements of parakeet-tdt-0.6b on a 24 GB GPU (5.2 GB at 30 s, 19 GB at 10 minutes, out of memory
at 11 minutes) give the same attention factor and a larger fixed part, which a GPU run should measure again.

An ASR actor's budget (`memory_budget_bytes`) is `resources.asr_memory_gb` where set, else 90% of the GPU's free
memory once the model is loaded, or on a CPU a share of the node's available memory divided among the ASR actors
that can share the node. `BatchSizing` turns model and budget into the batch bounds the length bucketing uses
(rows per batch at each length) and the longest piece one row may be decoded in at batch 1: a longer row is
decoded in chunks of that length (`pipeline/stages/chunks.py`), said once per actor.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FLOAT_BYTES = 4
GIB = 1 << 30

# bytes at a phase's peak / the architecture's count of floats in it, measured (benchmarks/encoder_memory.py) on
# the demo model and the production shapes at 80 and 128 mel features (2.27-2.33, 3.1 and 2.34-2.4 on the CPU) and
# rounded up; CUDA's full-attention factor from the published parakeet-tdt-0.6b figures is 2.56, and its fixed part
# (cuBLAS and cuDNN workspaces, the caching allocator) about 2 GiB beyond what is in use once the model is loaded
FACTORS = {"subsampling": 2.4, "layer": 3.5, "attention": 2.6, "local_attention": 2.6}
FIXED_BYTES = {"cpu": 64 << 20, "cuda": 2 * GIB}
CPU_MEMORY_SHARE = 0.4  # of the node's available memory, for the encoder batches of its ASR actors together
CUDA_MEMORY_SHARE = 0.9  # of the GPU's free memory after the model is loaded
CPU_BATCH_AUDIO_S = 300.0  # padded seconds per batch on a CPU: larger batches are no faster there


@dataclass(frozen=True)
class EncoderMemory:
    """Peak bytes of one encoder pass beyond its weights: `fixed + rows x max(subsampling_per_s x S,
    layer_per_s x S + attention_per_s2 x S^2)` for `rows` rows padded to `S` seconds."""

    subsampling_per_s: float
    layer_per_s: float
    attention_per_s2: float  # 0 with local attention (its cost is in layer_per_s)
    fixed_bytes: float = 0.0

    def row_bytes(self, seconds: float) -> float:
        """Peak bytes of one row of `seconds` (without `fixed_bytes`)."""
        return max(self.subsampling_per_s * seconds, self.layer_per_s * seconds + self.attention_per_s2 * seconds ** 2)

    def batch_bytes(self, rows: int, longest_s: float) -> float:
        return self.fixed_bytes + rows * self.row_bytes(longest_s)

    def max_rows(self, longest_s: float, budget_bytes: float) -> int:
        """The most rows padded to `longest_s` seconds that fit in `budget_bytes` (0: not even one)."""
        per_row = self.row_bytes(longest_s)
        room = budget_bytes - self.fixed_bytes
        if per_row <= 0:
            return 1 << 30
        return max(0, int(room // per_row))

    def longest_s(self, budget_bytes: float) -> float:
        """The longest row that fits in `budget_bytes` at batch 1 (seconds; inf where nothing grows)."""
        room = budget_bytes - self.fixed_bytes
        if room <= 0:
            return 0.0
        longest = math.inf
        if self.subsampling_per_s > 0:
            longest = room / self.subsampling_per_s
        if self.attention_per_s2 > 0:  # layer x S + attention x S^2 = room
            a, b = self.attention_per_s2, self.layer_per_s
            longest = min(longest, (-b + math.sqrt(b * b + 4 * a * room)) / (2 * a))
        elif self.layer_per_s > 0:
            longest = min(longest, room / self.layer_per_s)
        return longest


def encoder_memory(config: Mapping[str, Any], device: str, attention: str = "full",
                   local_context: int = 128) -> EncoderMemory | None:
    """The memory model of the encoder of a NeMo model config (`model_config.yaml` as a mapping: the `.nemo`'s, or
    NeMo's `cfg`) on `device` ("cpu" or "cuda"), with `attention` "full" or "local" (`local_context` frames a side);
    None for an encoder it does not describe (not a Conformer-style encoder with convolutional subsampling)."""
    encoder = config.get("encoder") or {}
    preprocessor = config.get("preprocessor") or {}
    try:
        d_model = int(encoder["d_model"])
        n_heads = int(encoder["n_heads"])
        features = int(encoder.get("feat_in") or preprocessor["features"])
        subsampling_factor = int(encoder.get("subsampling_factor") or 4)
        channels = int(encoder.get("subsampling_conv_channels") or -1)
        ff_expansion = float(encoder.get("ff_expansion_factor") or 4)
        stride_s = float(preprocessor.get("window_stride") or 0.01)
    except (KeyError, TypeError, ValueError):
        return None
    if "subsampling" not in encoder and "subsampling_factor" not in encoder:
        return None
    channels = d_model if channels <= 0 else channels
    factors = FACTORS
    feature_frames_per_s = 1.0 / stride_s
    frames_per_s = feature_frames_per_s / subsampling_factor
    subsampling = factors["subsampling"] * channels * math.ceil(features / 2) * feature_frames_per_s / 2 * FLOAT_BYTES
    layer = factors["layer"] * d_model * (2 + ff_expansion) * frames_per_s * FLOAT_BYTES
    # full: n_heads x (T x T + T x 2T) scores; local: n_heads x T x (2 w + 1)
    if attention == "local":
        layer += factors["local_attention"] * n_heads * frames_per_s * (2 * local_context + 1) * FLOAT_BYTES
        quadratic = 0.0
    else:
        quadratic = factors["attention"] * n_heads * 3 * frames_per_s ** 2 * FLOAT_BYTES
    return EncoderMemory(subsampling, layer, quadratic, float(FIXED_BYTES["cuda" if device == "cuda" else "cpu"]))


def memory_budget_bytes(device: str, asr_memory_gb: float | None = None, asr_actors: int = 1,
                        actor_cpus: float = 0.5) -> float:
    """Bytes an ASR actor's encoder batches may take: `asr_memory_gb` where given; on CUDA
    `CUDA_MEMORY_SHARE` of the device's free memory now (call it once the model is loaded); on a CPU
    `CPU_MEMORY_SHARE` of the node's available memory (`available_memory_bytes`), divided among the ASR actors
    that can share the node (the job's `asr_actors`, at most as many as the node's CPUs hold at `actor_cpus`
    each)."""
    if asr_memory_gb:
        return asr_memory_gb * GIB
    if device == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info()
        return free * CUDA_MEMORY_SHARE
    sharing = max(1, min(asr_actors, int((os.cpu_count() or 1) / max(actor_cpus, 1e-3))))
    return available_memory_bytes() * CPU_MEMORY_SHARE / sharing


def available_memory_bytes() -> float:
    """Memory this process's node can still give: the kernel's `MemAvailable`, or less where a cgroup (a container's
    memory limit, as on Kubernetes) allows less."""
    available = math.inf
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except OSError:
        pass
    if math.isinf(available):
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_file).read_text().strip()
            if limit != "max" and int(limit) < 1 << 60:
                available = min(available, int(limit) - int(Path(usage_file).read_text().strip()))
        except (OSError, ValueError):
            continue
    return float(max(available, 0))


@dataclass(frozen=True)
class BatchSizing:
    """The encoder batches an ASR actor makes: at most `batch_audio_s` padded seconds and `max_batch_size` rows,
    and at each length only as many rows as `memory` says fit in `budget_bytes`; a piece of audio longer than
    `longest_s` is never decoded whole (the ASR stage cuts it into chunks of at most that length)."""

    budget_bytes: float
    batch_audio_s: float
    max_batch_size: int
    memory: EncoderMemory | None = None

    @property
    def longest_s(self) -> float:
        return math.inf if self.memory is None else self.memory.longest_s(self.budget_bytes)

    def max_rows(self, longest_s: float) -> int:
        """Rows a batch whose longest row has `longest_s` seconds may hold (at least 1: a piece that fits nowhere is
        cut to `longest_s` before it gets here)."""
        rows = self.max_batch_size
        if math.isfinite(self.batch_audio_s) and longest_s * rows > self.batch_audio_s:
            rows = int(self.batch_audio_s // longest_s) if longest_s > 0 else rows
        if self.memory is not None:
            rows = min(rows, self.memory.max_rows(longest_s, self.budget_bytes))
        return max(1, rows)

    def halved(self) -> BatchSizing:
        """The same sizing with half the budget: after a batch ran out of memory the model was wrong."""
        return BatchSizing(self.budget_bytes / 2, self.batch_audio_s, self.max_batch_size, self.memory)

    def describe(self) -> str:
        longest = self.longest_s
        whole = "any length" if math.isinf(longest) else f"up to {longest:.0f} s"
        audio = "no bound" if math.isinf(self.batch_audio_s) else f"{self.batch_audio_s:g} s"
        return (f"encoder batches within {self.budget_bytes / GIB:.1f} GiB: at most {audio} of padded audio and "
                f"{self.max_batch_size} rows, rows decoded whole {whole}")


def batch_sizing(config: Mapping[str, Any], device: str, attention: str, local_context: int,
                 budget_bytes: float, batch_audio_s: float | None, max_batch_size: int) -> BatchSizing:
    """The sizing for a model `config` on `device`: the user's `batch_audio_s` where given, else none beyond
    memory on a GPU and `CPU_BATCH_AUDIO_S` on a CPU; the memory model of `encoder_memory` (none for an encoder it
    does not describe: then only the seconds and rows bound batches)."""
    if batch_audio_s is None:
        batch_audio_s = math.inf if device == "cuda" else CPU_BATCH_AUDIO_S
    return BatchSizing(budget_bytes, batch_audio_s, max_batch_size,
                       encoder_memory(config, device, attention, local_context))


__all__ = ["BatchSizing", "EncoderMemory", "available_memory_bytes", "batch_sizing", "encoder_memory",
           "memory_budget_bytes"]
