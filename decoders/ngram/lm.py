"""A token-level n-gram LM as tensors, queried over the whole vocabulary for a batch of states at once.

Structure (the GPU n-gram LM of NeMo's `NGramGPULanguageModel`, rebuilt here from the ARPA semantics):
- a state is a context (an n-gram of order < N that appears in the ARPA file, or a missing prefix the loader
  created); state 0 is the empty context and owns exactly V arcs, one per label, so that every label is
  found there at the latest (labels absent from the ARPA file get the `<unk>` probability, as in KenLM);
  state 1 is the context `<s>`;
- arcs are sorted by (state, label) and stored as keys `state * V + label`, so the arcs of state s are the
  contiguous range `arc_offsets[s] .. arc_offsets[s + 1]`, sorted by label; an arc holds the n-gram's
  log-probability and the state after the label (the longest suffix of context + label that is a state);
- each state has a backoff weight and a backoff target (its longest proper suffix that is a state), and a
  final weight: log p(</s> | context), resolved through backoffs at load time.

`advance` walks from each state down its backoff chain (at most N - 1 steps), looking up every label at
every level and keeping the most specific hit, plus the backoff weights passed on the way: exactly the
backoff formula `p(w | h) = p_arpa(h w)` if `h w` is listed, else `backoff(h) + p(w | h[1:])`.
ARPA files whose pruning dropped lower-order prefixes of kept n-grams (SRILM, varikn) get the missing
contexts created as n-grams whose probability is derived through backoff and whose backoff is 0, which
leaves every probability unchanged (KenLM does the same).

Scores are natural logs (ARPA's log10 times ln 10). Dims: B batch, V labels (no blank), S states, A arcs,
N order, K labels queried per state.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from decoders.ngram.arpa import (
    BOS_ID,
    EOS_ID,
    KENLM_MISSING_UNK_LOG10,
    UNK_ID,
    ArpaFormatError,
    ArpaModel,
    add_missing_prefixes,
    read_arpa,
)

LN10 = math.log(10.0)
EMPTY_STATE = 0
BOS_STATE = 1


@dataclass(frozen=True)
class NgramTensors:
    """The LM's arrays. Arcs are sorted by `arc_keys = state * vocab_size + label`."""

    arc_offsets: Tensor  # [S + 1] long: arcs of state s are arc_offsets[s] .. arc_offsets[s + 1]
    arc_keys: Tensor  # [A] long
    arc_weights: Tensor  # [A] float32, natural log
    arc_targets: Tensor  # [A] int32: state after the label
    backoff_targets: Tensor  # [S] long
    backoff_weights: Tensor  # [S] float32, natural log
    final_weights: Tensor  # [S] float32: log p(</s> | state), resolved through backoffs
    vocab_size: int
    max_order: int
    max_state_arcs: int  # most arcs of any state other than state 0 (bounds the binary search)

    @property
    def num_states(self) -> int:
        return self.backoff_targets.shape[0]

    @property
    def num_arcs(self) -> int:
        return self.arc_keys.shape[0]

    @property
    def device(self) -> torch.device:
        return self.arc_keys.device

    def to(self, device: torch.device | str) -> NgramTensors:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in moved.items():
            if isinstance(value, Tensor):
                moved[name] = value.to(device)
        return NgramTensors(**moved)


def walk_torch(lm: NgramTensors, states: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """states [B], labels [B, K] -> (scores [B, K] float32, next_states [B, K] long): the backoff walk.

    On a GPU the loop has a fixed length and no host synchronization (CUDA graphs can capture it); on the CPU
    it stops as soon as every row has reached the empty context.
    """
    vocab_size = lm.vocab_size
    scores = torch.zeros(labels.shape, dtype=torch.float32, device=labels.device)
    next_states = torch.zeros(labels.shape, dtype=torch.long, device=labels.device)
    found = torch.zeros(labels.shape, dtype=torch.bool, device=labels.device)
    accumulated = torch.zeros(states.shape, dtype=torch.float32, device=labels.device)  # backoffs passed
    last_arc = lm.num_arcs - 1
    state = states
    for _ in range(lm.max_order - 1):
        if not state.is_cuda and not bool(state.any()):
            break
        keys = state.unsqueeze(1) * vocab_size + labels
        index = torch.searchsorted(lm.arc_keys, keys).clamp_(max=last_arc)
        hit = (lm.arc_keys[index] == keys) & ~found & (state != EMPTY_STATE).unsqueeze(1)
        torch.where(hit, accumulated.unsqueeze(1) + lm.arc_weights[index], scores, out=scores)
        torch.where(hit, lm.arc_targets[index].long(), next_states, out=next_states)
        found |= hit
        accumulated = accumulated + lm.backoff_weights[state]
        state = lm.backoff_targets[state]
    # the empty context holds every label, at arc index == label
    torch.where(found, scores, accumulated.unsqueeze(1) + lm.arc_weights[labels], out=scores)
    torch.where(found, next_states, lm.arc_targets[labels].long(), out=next_states)
    return scores, next_states


def advance_torch(lm: NgramTensors, states: Tensor) -> tuple[Tensor, Tensor]:
    """states [B] -> (scores [B, V] float32, next_states [B, V] long) over the whole vocabulary.

    On a GPU: the backoff walk for every label (`walk_torch`: fixed shapes, no host synchronization, so CUDA
    graphs can capture it). On the CPU: `scatter_arcs_torch`, which touches only the arcs of the states on
    each backoff chain and is several times faster there. Both give bit-identical results.
    """
    if states.is_cuda:
        labels = torch.arange(lm.vocab_size, device=states.device).expand(states.shape[0], lm.vocab_size)
        return walk_torch(lm, states, labels)
    return scatter_arcs_torch(lm, states)


def scatter_arcs_torch(lm: NgramTensors, states: Tensor) -> tuple[Tensor, Tensor]:
    """states [B] -> (scores [B, V], next_states [B, V]): start from the empty context's arcs plus every backoff
    weight of the chain, then write the arcs of each state on the chain, from the shortest context to the
    longest, so that the most specific arc of each label is written last. Sizes depend on the data (host
    synchronization): meant for the CPU.
    """
    vocab_size = lm.vocab_size
    batch_size = states.shape[0]
    chain, accumulated = [states], [torch.zeros(batch_size, dtype=torch.float32, device=states.device)]
    for _ in range(lm.max_order - 1):
        if not bool(chain[-1].any()):
            break
        accumulated.append(accumulated[-1] + lm.backoff_weights[chain[-1]])
        chain.append(lm.backoff_targets[chain[-1]])
    scores = (accumulated[-1].unsqueeze(1) + lm.arc_weights[:vocab_size]).contiguous()
    next_states = lm.arc_targets[:vocab_size].long().expand(batch_size, vocab_size).contiguous()
    rows = torch.arange(batch_size, device=states.device)
    for level in range(len(chain) - 2, -1, -1):  # shortest non-empty context first
        state = chain[level]
        first = lm.arc_offsets[state]
        counts = torch.where(state != EMPTY_STATE, lm.arc_offsets[state + 1] - first, 0)
        total = int(counts.sum())
        if total == 0:
            continue
        arc_rows = torch.repeat_interleave(rows, counts, output_size=total)
        starts = torch.cumsum(counts, 0) - counts  # where each row's arcs begin in the flat list
        arcs = torch.arange(total, device=states.device) - starts[arc_rows] + first[arc_rows]
        labels = lm.arc_keys[arcs] - state[arc_rows] * vocab_size
        scores[arc_rows, labels] = accumulated[level][arc_rows] + lm.arc_weights[arcs]
        next_states[arc_rows, labels] = lm.arc_targets[arcs].long()
    return scores, next_states


class NgramLm:
    """A token-level n-gram LM (see module docstring) satisfying the `LanguageModel` protocol.

    `advance` runs the Triton kernel for CUDA tensors when Triton is importable (`use_triton=None`), or as
    `use_triton` says; the torch twin otherwise.
    """

    def __init__(self, tensors: NgramTensors, ngram_counts: list[int] | None = None,
                 use_triton: bool | None = None) -> None:
        self.tensors = tensors
        self.vocab_size = tensors.vocab_size
        self.max_order = tensors.max_order
        self.ngram_counts = list(ngram_counts) if ngram_counts is not None else []
        self.use_triton = use_triton

    # --- construction ------------------------------------------------------------------------------------
    @classmethod
    def from_arpa(cls, path: str | Path, vocab_size: int, **kwargs) -> NgramLm:
        """Read a token-level ARPA file (plain or gzip) for labels 0 .. vocab_size - 1."""
        arpa = read_arpa(path)
        try:
            tensors = tensors_from_arpa(arpa, vocab_size)
        except ArpaFormatError as error:
            raise ArpaFormatError(f"{path}: {error}") from None
        return cls(tensors, ngram_counts=[len(p) for p in arpa.log10_probs], **kwargs)

    @classmethod
    def load(cls, path: str | Path, verify: bool = True, **kwargs) -> NgramLm:
        """Memory-map a file written by `save` (see `load_tensors`)."""
        tensors, counts = load_tensors(path, verify=verify)
        return cls(tensors, ngram_counts=counts, **kwargs)

    def save(self, path: str | Path) -> None:
        save_tensors(path, self.tensors, self.ngram_counts)

    def to(self, device: torch.device | str) -> NgramLm:
        if torch.device(device) == self.tensors.device:
            return self
        return NgramLm(self.tensors.to(device), self.ngram_counts, self.use_triton)

    @property
    def device(self) -> torch.device:
        return self.tensors.device

    # --- the LanguageModel protocol -------------------------------------------------------------------------
    def initial_states(self, batch_size: int, bos: bool = True) -> Tensor:
        """-> states [B]: the `<s>` context (or the empty context with bos=False)."""
        return torch.full((batch_size,), BOS_STATE if bos else EMPTY_STATE, dtype=torch.long, device=self.device)

    def advance(self, states: Tensor) -> tuple[Tensor, Tensor]:
        """states [B] -> (scores [B, V] natural-log float32, next_states [B, V] long)."""
        if states.dim() != 1:
            raise ValueError(f"states must be [B], got {tuple(states.shape)}")
        if self._triton_for(states):
            from decoders.ngram.triton import advance_triton

            return advance_triton(self.tensors, states)
        return advance_torch(self.tensors, states)

    def final_scores(self, states: Tensor) -> Tensor:
        """states [B] -> [B] log p(</s> | state)."""
        return self.tensors.final_weights[states]

    # --- queries for tests and perplexity ----------------------------------------------------------------
    def score_labels(self, states: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """states [B], labels [B, K] -> (scores [B, K], next_states [B, K]) for just those labels."""
        if labels.dim() != 2 or labels.shape[0] != states.shape[0]:
            raise ValueError(f"labels must be [B, K] with B={states.shape[0]}, got {tuple(labels.shape)}")
        return walk_torch(self.tensors, states, labels)

    def score_sequences(self, tokens: Tensor, token_lengths: Tensor, bos: bool = True,
                        eos: bool = True) -> Tensor:
        """tokens [B, L], token_lengths [B] -> [B] float64 natural-log probability of each sequence.

        With `bos` the sequence starts in the `<s>` context; with `eos` the end of sentence is scored.
        Perplexity over a set: `exp(-sum(scores) / (sum(token_lengths) + B * eos))`.
        """
        if tokens.dim() != 2 or token_lengths.shape != (tokens.shape[0],):
            raise ValueError(f"tokens must be [B, L] and token_lengths [B], got {tuple(tokens.shape)} and "
                             f"{tuple(token_lengths.shape)}")
        tokens = tokens.to(self.device, torch.long)
        token_lengths = token_lengths.to(self.device, torch.long)
        if tokens.numel() > 0:
            low, high = int(tokens.min()), int(tokens.max())
            if low < 0 or high >= self.vocab_size:
                raise ValueError(f"tokens must lie in [0, {self.vocab_size}), got values in [{low}, {high}]")
        states = self.initial_states(tokens.shape[0], bos=bos)
        total = torch.zeros(tokens.shape[0], dtype=torch.float64, device=self.device)
        for position in range(tokens.shape[1]):
            inside = position < token_lengths
            scores, next_states = walk_torch(self.tensors, states, tokens[:, position : position + 1])
            total += torch.where(inside, scores[:, 0].double(), 0.0)
            states = torch.where(inside, next_states[:, 0], states)
        if eos:
            total += self.final_scores(states).double()
        return total

    def _triton_for(self, states: Tensor) -> bool:
        if self.use_triton is not None:
            return self.use_triton
        if not states.is_cuda:
            return False
        try:
            import triton  # noqa: F401
        except ImportError:
            return False
        return True


# --- ARPA -> tensors --------------------------------------------------------------------------------------
def tensors_from_arpa(arpa: ArpaModel, vocab_size: int) -> NgramTensors:
    """Build the tensors of a token-level LM over labels 0 .. vocab_size - 1 from parsed ARPA n-grams."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    max_order = arpa.max_order
    entries: dict[tuple[int, ...], tuple[float, float]] = {}  # log10 prob, log10 backoff
    for order_index in range(max_order):
        rows = arpa.tokens[order_index].tolist()
        probs = arpa.log10_probs[order_index].tolist()
        backoffs = arpa.log10_backoffs[order_index].tolist()
        for row, prob, backoff in zip(rows, probs, backoffs):
            key = tuple(row)
            if key in entries:
                raise ArpaFormatError(f"duplicate {len(key)}-gram {key}")
            entries[key] = (prob, backoff)
    unigram_tokens = {key[0] for key in entries if len(key) == 1}
    for key in entries:
        for token in key:
            if token >= vocab_size:
                raise ArpaFormatError(f"token id {token} in n-gram {key} is outside the vocabulary "
                                      f"(vocab_size={vocab_size})")
            if len(key) > 1 and token not in unigram_tokens:
                raise ArpaFormatError(f"token id {token} in n-gram {key} has no unigram entry")
    if (BOS_ID,) not in entries:
        entries[(BOS_ID,)] = (-99.0, 0.0)
    unk_log10 = entries[(UNK_ID,)][0] if (UNK_ID,) in entries else KENLM_MISSING_UNK_LOG10

    add_missing_prefixes(entries, unk_log10)

    # states: the empty context, <s>, then every other listed context of order < N
    state_ids: dict[tuple[int, ...], int] = {(): EMPTY_STATE, (BOS_ID,): BOS_STATE}
    for key in sorted((k for k in entries if len(k) < max_order and EOS_ID not in k), key=lambda k: (len(k), k)):
        state_ids.setdefault(key, len(state_ids))
    num_states = len(state_ids)

    def suffix_state(key: tuple[int, ...], start: int) -> int:
        for offset in range(start, len(key)):
            state = state_ids.get(key[offset:])
            if state is not None:
                return state
        return EMPTY_STATE

    unknown_labels = [label for label in range(vocab_size) if label not in unigram_tokens]
    arc_sources: list[int] = []
    arc_labels: list[int] = []
    arc_log10: list[float] = []
    arc_targets: list[int] = []
    eos_log10: dict[int, float] = {}
    for key, (prob, _) in entries.items():
        context, token = key[:-1], key[-1]
        source = state_ids.get(context)
        if source is None or token == BOS_ID:
            continue  # a context that cannot occur (after </s>), or <s> in the middle: never queried
        if token == EOS_ID:
            eos_log10[source] = prob
            continue
        target = suffix_state(key, 0)
        labels = unknown_labels if token == UNK_ID else [token]
        for label in labels:
            arc_sources.append(source)
            arc_labels.append(label)
            arc_log10.append(prob)
            arc_targets.append(target)
    if (UNK_ID,) not in entries:
        for label in unknown_labels:
            arc_sources.append(EMPTY_STATE)
            arc_labels.append(label)
            arc_log10.append(unk_log10)
            arc_targets.append(EMPTY_STATE)

    backoff_targets = np.zeros(num_states, dtype=np.int64)
    backoff_log10 = np.zeros(num_states, dtype=np.float64)
    final_log10 = np.zeros(num_states, dtype=np.float64)
    for key, state in sorted(state_ids.items(), key=lambda item: len(item[0])):  # shorter contexts first
        if not key:
            final_log10[state] = eos_log10.get(state, entries.get((EOS_ID,), (unk_log10, 0.0))[0])
            continue
        backoff_targets[state] = suffix_state(key, 1)
        backoff_log10[state] = entries[key][1]
        if state in eos_log10:
            final_log10[state] = eos_log10[state]
        else:
            final_log10[state] = backoff_log10[state] + final_log10[backoff_targets[state]]

    sources = np.array(arc_sources, dtype=np.int64)
    keys = sources * vocab_size + np.array(arc_labels, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    if len(keys) > 1 and bool(np.any(keys[1:] == keys[:-1])):
        duplicate = int(keys[1:][keys[1:] == keys[:-1]][0])
        raise ArpaFormatError(f"two n-grams give state {duplicate // vocab_size} the label {duplicate % vocab_size}")
    sources = sources[order]
    offsets = np.searchsorted(sources, np.arange(num_states + 1), side="left").astype(np.int64)
    root_arcs = int(offsets[1] - offsets[0])
    if root_arcs != vocab_size:
        raise AssertionError(f"the empty context must own {vocab_size} arcs, got {root_arcs}")
    arc_counts = np.diff(offsets)
    max_state_arcs = int(arc_counts[1:].max()) if num_states > 1 else 0
    return NgramTensors(
        arc_offsets=torch.from_numpy(offsets),
        arc_keys=torch.from_numpy(keys),
        arc_weights=torch.from_numpy((np.array(arc_log10, dtype=np.float64)[order] * LN10).astype(np.float32)),
        arc_targets=torch.from_numpy(np.array(arc_targets, dtype=np.int32)[order]),
        backoff_targets=torch.from_numpy(backoff_targets),
        backoff_weights=torch.from_numpy((backoff_log10 * LN10).astype(np.float32)),
        final_weights=torch.from_numpy((final_log10 * LN10).astype(np.float32)),
        vocab_size=vocab_size,
        max_order=max_order,
        max_state_arcs=max_state_arcs,
    )


# --- binary format ----------------------------------------------------------------------------------------
MAGIC = b"LSNGRAM\x00"
FORMAT_VERSION = 1
_FIXED_HEADER = struct.Struct("<8sIIQI")  # magic, version, JSON length, data length, CRC-32 of JSON + data
_ALIGNMENT = 64
_ARRAYS = ("arc_offsets", "arc_keys", "arc_weights", "arc_targets", "backoff_targets", "backoff_weights",
           "final_weights")


class NgramFileError(ValueError):
    """A binary LM file that is not one, has another version, or fails its checksum."""


def _aligned(offset: int) -> int:
    return (offset + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT


def save_tensors(path: str | Path, lm: NgramTensors, ngram_counts: list[int]) -> None:
    """Write the LM as: fixed header, JSON description, 64-byte aligned little-endian arrays.

    The file is written next to its destination and renamed into place, so a reader never sees half a file.
    """
    arrays = {name: getattr(lm, name).cpu().contiguous().numpy() for name in _ARRAYS}
    layout = {}
    offset = 0
    for name, array in arrays.items():
        offset = _aligned(offset)
        layout[name] = {"offset": offset, "dtype": array.dtype.newbyteorder("<").str, "shape": list(array.shape)}
        offset += array.nbytes
    data_length = _aligned(offset)
    description = json.dumps({
        "vocab_size": lm.vocab_size, "max_order": lm.max_order, "max_state_arcs": lm.max_state_arcs,
        "num_states": lm.num_states, "num_arcs": lm.num_arcs, "ngram_counts": list(ngram_counts),
        "arrays": layout,
    }).encode()
    description += b" " * (_aligned(_FIXED_HEADER.size + len(description)) - _FIXED_HEADER.size - len(description))
    data = bytearray(data_length)
    for name, array in arrays.items():
        start = layout[name]["offset"]
        data[start : start + array.nbytes] = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    checksum = zlib.crc32(data, zlib.crc32(description))
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as out:
        out.write(_FIXED_HEADER.pack(MAGIC, FORMAT_VERSION, len(description), data_length, checksum))
        out.write(description)
        out.write(data)
    partial.replace(path)


def load_tensors(path: str | Path, verify: bool = True) -> tuple[NgramTensors, list[int]]:
    """Memory-map a binary LM (copy-on-write: processes share the pages until one writes).

    `verify` recomputes the CRC-32 over the file (about 1 s per GB); skip it for a file already checked.
    """
    path = str(path)
    with open(path, "rb") as handle:
        fixed = handle.read(_FIXED_HEADER.size)
        if len(fixed) < _FIXED_HEADER.size:
            raise NgramFileError(f"{path}: too short to be a binary n-gram LM")
        magic, version, description_length, data_length, checksum = _FIXED_HEADER.unpack(fixed)
        if magic != MAGIC:
            raise NgramFileError(f"{path}: not a binary n-gram LM (magic {magic!r}); ARPA files load with "
                                 "NgramLm.from_arpa")
        if version != FORMAT_VERSION:
            raise NgramFileError(f"{path}: format version {version}, this code reads version {FORMAT_VERSION}; "
                                 "rebuild it with `python -m decoders.ngram.build`")
        description = handle.read(description_length)
    data_start = _FIXED_HEADER.size + description_length
    mapped = np.memmap(path, dtype=np.uint8, mode="c")
    if mapped.shape[0] < data_start + data_length:
        raise NgramFileError(f"{path}: truncated: {mapped.shape[0]} bytes, header says {data_start + data_length}")
    if verify:
        crc = zlib.crc32(description)
        chunk = 1 << 26
        for start in range(data_start, data_start + data_length, chunk):
            crc = zlib.crc32(mapped[start : min(start + chunk, data_start + data_length)], crc)
        if crc != checksum:
            raise NgramFileError(f"{path}: checksum mismatch (file {checksum:#010x}, contents {crc:#010x}): "
                                 "the file is damaged")
    info = json.loads(description)
    tensors = {}
    for name in _ARRAYS:
        entry = info["arrays"][name]
        dtype = np.dtype(entry["dtype"])
        count = int(np.prod(entry["shape"], dtype=np.int64))
        start = data_start + entry["offset"]
        array = mapped[start : start + count * dtype.itemsize].view(dtype).reshape(entry["shape"])
        tensors[name] = torch.from_numpy(array)
    lm = NgramTensors(**tensors, vocab_size=info["vocab_size"], max_order=info["max_order"],
                      max_state_arcs=info["max_state_arcs"])
    return lm, info["ngram_counts"]


__all__ = ["NgramLm", "NgramTensors", "advance_torch", "walk_torch", "scatter_arcs_torch", "tensors_from_arpa",
           "save_tensors", "load_tensors", "NgramFileError"]
