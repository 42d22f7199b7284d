"""Sharded corpora written as their tools write them, for tests: a NeMo tarred set in the layout of NeMo's
`scripts/speech_recognition/convert_to_tarred_audio_dataset.py` (flattened member names, `-sub{N}` repeats not stored
twice, `shard_id`, `sharded_manifests/`, `metadata.yaml`; the remainder of rows over shards is kept here, not
discarded as NeMo does), a Lhotse Shar written by lhotse's `SharWriter`, and WebDataset tars."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_nemo_tarred(entries: list[dict[str, Any]], manifest_folder: Path, target: Path,
                      num_shards: int) -> list[dict]:
    """`entries` (NeMo lines, `audio_filepath` relative to `manifest_folder`) as a NeMo tarred set in `target`:
    shard i holds entries i*k ... (k = len // num_shards, the last shard the rest); returns the tarred lines."""
    target.mkdir(parents=True, exist_ok=True)
    (target / "sharded_manifests").mkdir(exist_ok=True)
    per_shard = len(entries) // num_shards
    lines: list[dict[str, Any]] = []
    for shard in range(num_shards):
        chunk = entries[shard * per_shard: (shard + 1) * per_shard if shard < num_shards - 1 else len(entries)]
        count: dict[str, int] = {}
        shard_lines = []
        with tarfile.open(target / f"audio_{shard}.tar", "w") as tar:
            for entry in chunk:
                path = manifest_folder / entry["audio_filepath"]
                base, ext = os.path.splitext(str(path))
                base = base.replace("/", "_").replace(".", "_")
                squashed = f"{base}{ext}"
                if squashed not in count:
                    add_member(tar, squashed, path.read_bytes())
                    name = squashed
                    count[squashed] = 1
                else:  # NeMo stores a file once; its repeats name it with -subN
                    name = f"{base}-sub{count[squashed]}{ext}"
                    count[squashed] += 1
                shard_lines.append({**entry, "audio_filepath": name, "shard_id": shard})
        (target / "sharded_manifests" / f"manifest_{shard}.json").write_text(
            "".join(json.dumps(line) + "\n" for line in shard_lines))
        lines += shard_lines
    (target / "tarred_audio_manifest.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (target / "metadata.yaml").write_text(f"version: 0\nnum_samples_per_shard: {per_shard}\n"
                                          f"dataset_config:\n  num_shards: {num_shards}\n  shuffle: false\n")
    return lines


def write_shar(audio_files: list[Path], texts: list[str], target: Path, shard_size: int) -> list[str]:
    """The files as cuts (ids: the files' stems) with one supervision each, written by lhotse's SharWriter with
    FLAC recordings; returns the cut ids."""
    from lhotse import CutSet, Recording, SupervisionSegment
    from lhotse.shar import SharWriter

    target.mkdir(parents=True, exist_ok=True)
    cuts = []
    for path, text in zip(audio_files, texts):
        cut = Recording.from_file(path).to_cut()
        cut.supervisions = [SupervisionSegment(id=f"{cut.id}-sup", recording_id=cut.recording_id, start=0.0,
                                               duration=cut.duration, text=text)]
        cuts.append(cut)
    with SharWriter(str(target), fields={"recording": "flac"}, shard_size=shard_size) as writer:
        for cut in CutSet.from_cuts(cuts):
            writer.write(cut)
    return [cut.id for cut in cuts]


def write_webdataset(samples: list[tuple[str, Path, dict | str | None]], tar_path: Path) -> None:
    """A WebDataset tar: per sample (key, audio file, its `.json` object, its `.txt` text, or None), the audio as
    `{key}.<ext>` and then the sidecar."""
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tar_path, "w") as tar:
        for key, audio, sidecar in samples:
            add_member(tar, f"{key}{audio.suffix}", audio.read_bytes())
            if isinstance(sidecar, dict):
                add_member(tar, f"{key}.json", json.dumps(sidecar).encode())
            elif isinstance(sidecar, str):
                add_member(tar, f"{key}.txt", sidecar.encode())
