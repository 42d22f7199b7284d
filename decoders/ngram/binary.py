"""The binary file of an n-gram LM: `NgramTensors` written once, memory-mapped by every reader.

Layout, little-endian: a fixed header (magic `LSNGRAM\\0`, format version, JSON length, data length, CRC-32 of
JSON + data), a JSON description (sizes, n-gram counts, each array's offset, dtype and shape) padded to 64
bytes, then the arrays of `NgramTensors`, each starting on a 64-byte boundary. Readers map the file
copy-on-write, so processes on one machine share its pages.

Dims: S states, A arcs (the arrays are [S + 1], [A] and [S], as in `NgramTensors`).
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import torch

from decoders.ngram.tensors import NgramTensors

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
                                 "rebuild it with `python jobs/build_lm.py`")
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


__all__ = ["NgramFileError", "load_tensors", "save_tensors"]
