"""A manifest as a careless or hostile user would hand it over: good lines, and bad ones of every kind.

`write_hostile_corpus(folder, lines, audio_files)` writes `folder/manifest.json` of `lines` lines, one in five
bad, 20 kinds of bad line taken in turn (malformed lines, wrong types, missing and null keys, non-UTF-8
bytes, NUL bytes, non-finite and huge numbers; missing, corrupt, header-only, empty, directory, FIFO, lying-header,
NaN-sample, absurd-frame-count audio; offsets past the end). Every good line is a distinct utterance (its own
`id`). Returns what the job must give: the manifest, the number of lines, and for each bad line its line number
and a piece of the error text. Used by `tests/pipeline/test_hostile_corpus_ray.py` and
`benchmarks/bad_input.py`, with `PeakRss`, the memory of this process and every process it started.
"""

from __future__ import annotations

import io
import json
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

BAD_EVERY = 5  # one line in five is bad


@dataclass(frozen=True)
class HostileCorpus:
    manifest: Path
    lines: int
    bad: dict[int, str]  # line number -> a piece of its error text


def _wav(samples: np.ndarray, rate: int, subtype: str = "PCM_16") -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype=subtype)
    return buffer.getvalue()


def _bad_audio(folder: Path) -> dict[str, Path]:
    """The bad audio files, each written once."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {name: folder / name for name in (
        "corrupt.wav", "header_only.flac", "empty.wav", "fifo.wav", "one_hz.wav", "nan.wav", "huge_frames.flac")}
    files["corrupt.wav"].write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk" + os.urandom(2000))
    tone = np.sin(np.arange(16000) * 0.05).astype(np.float32) * 0.3
    buffer = io.BytesIO()
    soundfile.write(buffer, tone, 16000, format="FLAC")
    files["header_only.flac"].write_bytes(buffer.getvalue()[:200])
    files["empty.wav"].write_bytes(b"")
    if not files["fifo.wav"].exists():
        os.mkfifo(files["fifo.wav"])  # nothing ever writes to it: opening it for reading would block forever
    # 27,000 samples whose header says 1 Hz: decoded at 16 kHz that would be 7.5 hours
    one_hz = bytearray(_wav(np.zeros(27_000, np.float32), 16000))
    one_hz[24:28] = struct.pack("<I", 1)  # sample rate
    one_hz[28:32] = struct.pack("<I", 2)  # byte rate
    files["one_hz.wav"].write_bytes(bytes(one_hz))
    nan = tone.copy()
    nan[100:200] = np.nan
    files["nan.wav"].write_bytes(_wav(nan, 16000, "FLOAT"))
    # a FLAC whose header declares 2^36 - 1 frames (49 days at 16 kHz) on a 1 s body: a reader trusting it would
    # allocate for all of them (a WAV's data size is no such trap: libsndfile cuts it to the bytes present)
    buffer = io.BytesIO()
    soundfile.write(buffer, tone, 16000, format="FLAC")
    huge = bytearray(buffer.getvalue())
    streaminfo = 8  # "fLaC" and the metadata block header; total frames are the low 36 bits of bytes 13-17
    huge[streaminfo + 13] |= 0x0F
    huge[streaminfo + 14:streaminfo + 18] = b"\xff\xff\xff\xff"
    files["huge_frames.flac"].write_bytes(bytes(huge))
    (folder / "a_directory.wav").mkdir(exist_ok=True)
    files["a_directory.wav"] = folder / "a_directory.wav"
    return files


def write_hostile_corpus(folder: Path, lines: int, audio_files: list[Path]) -> HostileCorpus:
    folder.mkdir(parents=True, exist_ok=True)
    bad_audio = _bad_audio(folder / "bad_audio")
    good = str(audio_files[0])
    def kinds(n: int) -> list[tuple[bytes, str]]:
        """The bad lines, each made distinct by `n` (identical lines would be one utterance, hence one row)."""
        def nemo(**values: object) -> bytes:
            return json.dumps({"id": f"bad-{n}", **values}).encode()

        return [  # (line, piece of the error)
            (b'{"id": "bad-%d", "audio_filepath": "a.wav", "dur' % n, "malformed JSON"),
            (b"[%d, 2, 3]" % n, "expected a JSON object"),
            (nemo(duration=1.0), "'audio_filepath'"),
            (nemo(audio_filepath=None, duration=1.0), "'audio_filepath' is null"),
            (nemo(audio_filepath=good, duration="long"), "'duration'"),
            (nemo(audio_filepath=good, duration=1.0, offset=-3), "must not be negative"),
            (b'{"id": "bad-%d", "audio_filepath": "%s", "duration": NaN}' % (n, good.encode()), "'duration'"),
            (nemo(audio_filepath=good, duration=1e12), "max_row_duration_s"),
            (b'{"id": "bad-%d", "audio_filepath": "caf\xe9.wav", "duration": 1.0}' % n, "UTF-8"),
            (b'{"id": "bad-%d", "audio_filepath": "a\x00.wav", "duration": 1.0}' % n, "NUL"),
            (nemo(audio_filepath=str(folder / "missing.wav"), duration=1.0), "file not found"),
            (nemo(audio_filepath=str(bad_audio["corrupt.wav"]), duration=1.0), "corrupt.wav"),
            (nemo(audio_filepath=str(bad_audio["header_only.flac"]), duration=1.0), "header_only.flac"),
            (nemo(audio_filepath=str(bad_audio["empty.wav"]), duration=1.0), "empty file"),
            (nemo(audio_filepath=str(bad_audio["fifo.wav"]), duration=1.0), "not a regular file"),
            (nemo(audio_filepath=str(bad_audio["one_hz.wav"]), duration=0.0), "1 Hz"),
            (nemo(audio_filepath=str(bad_audio["nan.wav"]), duration=1.0), "NaN"),
            (nemo(audio_filepath=str(bad_audio["huge_frames.flac"]), duration=0), "max_row_duration_s"),
            (nemo(audio_filepath=good, duration=1.0, offset=9999.0), "past the end"),
            (nemo(audio_filepath=str(bad_audio["a_directory.wav"]), duration=1.0), "a_directory.wav"),
        ]

    kind_count = len(kinds(0))
    manifest = folder / "manifest.json"
    bad: dict[int, str] = {}
    with open(manifest, "wb") as handle:
        for index in range(lines):
            line_number = index + 1
            if index % BAD_EVERY == BAD_EVERY - 1:
                line, piece = kinds(index)[(index // BAD_EVERY) % kind_count]
                bad[line_number] = piece
            else:
                audio = audio_files[index % len(audio_files)]
                line = json.dumps({"id": f"utt-{index}", "audio_filepath": str(audio), "duration": 0.4,
                                   "offset": 0.01 * (index % 50), "text": "words"}).encode()
            handle.write(line + b"\n")
    return HostileCorpus(manifest=manifest, lines=lines, bad=bad)


class PeakRss:
    """Samples, every `interval_s` until `stop()`, the summed resident memory of this process and all its
    descendants (an in-process Ray's GCS, raylet and workers), read from /proc. Shared pages count once per
    process, so the figure is an upper bound. `added_bytes`: the peak over what they held when sampling began (a
    session's Ray, and models earlier tests loaded into this process, are not the job's)."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.start_bytes = _rss_bytes(_descendants(os.getpid()) | {os.getpid()})
        self.peak_bytes = self.start_bytes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.peak_bytes = max(self.peak_bytes, _rss_bytes(_descendants(os.getpid()) | {os.getpid()}))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def added_bytes(self) -> int:
        return self.peak_bytes - self.start_bytes


def _rss_bytes(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as handle:
                total += int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            pass  # the process ended
    return total


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, stack = set(), [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found
