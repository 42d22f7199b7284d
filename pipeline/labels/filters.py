"""Pseudo-labels from transcripts: which utterances to keep for training, and the manifests they go into.

`judge` gives the reason an utterance is rejected (None: kept), from its transcript row (`schema.OUTPUT_SCHEMA`)
and `LabelFilters`, checked in this order: an error row; an empty transcript; duration out of range; the
utterance confidence below `min_confidence`; a hybrid model's two heads agreeing on fewer than `min_head_agreement`
of the words (where the transcripts hold `head_agreement`); characters per second out of range (too many: the model
wrote text the audio cannot hold; too few: it dropped speech); a word n-gram repeated back to back more than
`max_repeats` times (a decoding loop, the usual hallucination; words compared in their plain form, so "Go, go, go."
repeats "go").

Characters per second count the letters of what was said (`spoken_letters`): the transcript's plain form
(`pipeline/lm/text.py::plain_text`: numbers spelled out, punctuation, symbols, apostrophes and spaces left out),
so that a cased, punctuated model's "Yes. No! 42, please?" counts as "yes no forty two please", as a lower-case
model's transcript of the same speech does; the limits stay those measured on lower-case text.

Manifests: `nemo_line` (NeMo JSON-lines: `audio_filepath`, `duration`, `offset` where not 0, `text` = the
pseudo-label, `confidence`, the input's own `text` as `orig_text`, and for a segment written to its own file
`source_audio_filepath` and `source_audio_offset`) and `lhotse_cut` (a Lhotse `MonoCut` with its recording, as long
as the file where known, and one supervision, as `lhotse.load_manifest` reads `.jsonl.gz`). A segment of a longer
transcript (`pipeline/labels/segments.py`) is a row of the same shape and goes through the same functions.

Audio listed without a manifest (`audio_entries`) gets, per file, an `id` of its URI, size and modification
time (or ETag), so the transcripts of a rewritten file are not taken for those of the old one.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from pipeline import schema
from pipeline.lm.text import plain_text
from pipeline.settings import check_settings, setting

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class LabelFilters:
    """What a kept utterance must satisfy (defaults measured on the bundled test set: docs/pseudo_label.md)."""

    # the utterance's confidence: the mean of its words' (NeMo's default measure)
    min_confidence: float = setting(0.3, "utterance confidence a kept utterance needs", minimum=0, maximum=1)
    min_duration_s: float = setting(0.3, "shortest utterance kept, seconds", minimum=0, finite=True)
    max_duration_s: float = setting(40.0, "longest utterance kept, seconds", minimum=0, finite=True)
    min_chars_per_s: float = setting(
        2.0, "fewest characters per second of a kept utterance (letters of the words said: punctuation and spaces "
             "not counted, numbers as words)", minimum=0, finite=True)
    max_chars_per_s: float = setting(
        30.0, "most characters per second of a kept utterance (counted as for --min-chars-per-s)", minimum=0,
        finite=True)
    max_repeats: int = setting(3, "a word n-gram (n <= 4) repeated back to back more than this is rejected",
                               minimum=1)
    min_head_agreement: float = setting(
        0.5, "a hybrid model (both heads): the share of words the other head's greedy text agrees on (1 - WER between "
             "them) a kept utterance needs; 0 turns the second decode off", minimum=0, maximum=1)

    def __post_init__(self) -> None:
        check_settings(self)
        if not self.min_duration_s < self.max_duration_s:
            raise ValueError(f"need 0 <= min_duration_s < max_duration_s, got {self.min_duration_s}, "
                             f"{self.max_duration_s}")
        if not self.min_chars_per_s < self.max_chars_per_s:
            raise ValueError(f"need 0 <= min_chars_per_s < max_chars_per_s, got {self.min_chars_per_s}, "
                             f"{self.max_chars_per_s}")

def duration_of(row: dict[str, Any]) -> float:
    """Seconds of audio the utterance is: measured where known, else the manifest's."""
    return row.get(schema.AUDIO_DURATION) or row.get(schema.DURATION) or 0.0


def spoken_letters(text: str) -> int:
    """The letters of the words `text` says: its plain form without spaces (module docstring)."""
    return sum(not char.isspace() for char in plain_text(text))


def longest_repeat(words: list[str], max_n: int = 4) -> tuple[int, str]:
    """The most times a word n-gram (n <= max_n) follows itself back to back, and that n-gram."""
    best, shown = 1, ""
    for n in range(1, max_n + 1):
        for start in range(0, len(words) - n):
            count = 1
            while words[start + count * n: start + (count + 1) * n] == words[start: start + n]:
                count += 1
            if count > best:
                best, shown = count, " ".join(words[start: start + n])
    return best, shown


def judge(row: dict[str, Any], filters: LabelFilters) -> str | None:
    """Why this transcript row is not a training label (None: it is one). See the module docstring."""
    if row[schema.STATUS] != schema.STATUS_OK:
        return f"error: {row[schema.ERROR]}"
    text = (row[schema.TEXT] or "").strip()
    if not text:
        return "empty transcript"
    duration = duration_of(row)
    if not filters.min_duration_s <= duration <= filters.max_duration_s:
        return f"duration {duration:.2f} s outside [{filters.min_duration_s:g}, {filters.max_duration_s:g}] s"
    confidence = row.get(schema.CONFIDENCE)
    if confidence is None:
        return "no confidence (the decoding gave none)"
    if confidence < filters.min_confidence:
        return f"confidence {confidence:.3f} < {filters.min_confidence:g}"
    agreement = row.get(schema.HEAD_AGREEMENT)
    if agreement is not None and agreement < filters.min_head_agreement:
        return (f"heads disagree: agreement {agreement:.2f} < {filters.min_head_agreement:g} (the other head: "
                f"{row.get(schema.SECOND_HEAD_TEXT)!r})")
    rate = spoken_letters(text) / duration
    if not filters.min_chars_per_s <= rate <= filters.max_chars_per_s:
        return f"{rate:.1f} characters/s outside [{filters.min_chars_per_s:g}, {filters.max_chars_per_s:g}]"
    repeats, ngram = longest_repeat(_WORD.findall(plain_text(text)))
    if repeats > filters.max_repeats:
        return f"repetition: {ngram!r} {repeats} times in a row"
    return None


def nemo_line(row: dict[str, Any]) -> dict[str, Any]:
    line: dict[str, Any] = {"audio_filepath": row[schema.AUDIO_FILEPATH], "duration": round(duration_of(row), 6)}
    if row[schema.OFFSET]:
        line["offset"] = row[schema.OFFSET]
    line["text"] = row[schema.TEXT]
    line["confidence"] = row[schema.CONFIDENCE]
    if row[schema.REFERENCE_TEXT]:
        line["orig_text"] = row[schema.REFERENCE_TEXT]
    # audio cut into its own file: a segment (--cut-audio), or a member of an input tar shard
    for key in ("source_audio_filepath", "source_audio_offset", "source_shard_member"):
        if row.get(key) is not None:
            line[key] = row[key]
    return line


def rejected_line(row: dict[str, Any], reason: str) -> dict[str, Any]:
    line = {"audio_filepath": row[schema.AUDIO_FILEPATH], "duration": round(duration_of(row), 6)}
    if row[schema.OFFSET]:
        line["offset"] = row[schema.OFFSET]
    if row[schema.TEXT]:
        line["text"] = row[schema.TEXT]
    line["confidence"] = row.get(schema.CONFIDENCE)
    line["reason"] = reason
    if row[schema.REFERENCE_TEXT]:
        line["orig_text"] = row[schema.REFERENCE_TEXT]
    return line


def lhotse_cut(row: dict[str, Any], sample_rate: int) -> dict[str, Any]:
    """A Lhotse MonoCut (as `Cut.to_dict()` writes it) of the utterance, with the pseudo-label as supervision."""
    duration = round(duration_of(row), 6)
    offset = float(row[schema.OFFSET] or 0.0)
    cut_id = row[schema.UTTERANCE_ID]
    recording_id = "rec-" + hashlib.sha1(row[schema.AUDIO_FILEPATH].encode()).hexdigest()[:16]
    channel = row.get(schema.CHANNEL) or 0
    # the recording as long as the file is where known (the segments of one recording then agree on it)
    total = max(offset + duration, row.get(schema.FILE_DURATION) or 0.0)
    return {
        "id": cut_id, "start": offset, "duration": duration, "channel": channel,
        "supervisions": [{"id": f"{cut_id}-sup", "recording_id": recording_id, "start": 0.0, "duration": duration,
                          "channel": channel, "text": row[schema.TEXT],
                          "custom": {"confidence": row[schema.CONFIDENCE],
                                     **({"orig_text": row[schema.REFERENCE_TEXT]}
                                        if row[schema.REFERENCE_TEXT] else {})}}],
        "recording": {"id": recording_id, "sources": [{"type": "file", "channels": [channel],
                                                       "source": row[schema.AUDIO_FILEPATH]}],
                      "sampling_rate": sample_rate, "num_samples": int(round(total * sample_rate)),
                      "duration": total, "channel_ids": [channel]},
        "type": "MonoCut",
    }


def audio_entries(uris: list[str]) -> list[dict[str, Any]]:
    """Audio files (local paths or URIs) -> manifest lines: `audio_filepath`, `duration` from the header (0, to
    the end, where it cannot be read: the audio stage then says why), and an `id` of URI, size and modification
    time or ETag."""
    import fsspec
    import soundfile

    lines = []
    for uri in uris:
        filesystem, path = fsspec.core.url_to_fs(uri)
        try:
            info = filesystem.info(path)
        except Exception:  # gone since listed: the audio stage reports it
            info = {}
        version = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or ""
        duration = 0.0
        try:
            with filesystem.open(path, "rb") as handle:
                header = soundfile.info(handle)
                duration = float(header.frames) / header.samplerate if header.samplerate else 0.0
        except Exception:
            pass
        lines.append({"id": f"{uri}|{info.get('size', '')}|{version}", "audio_filepath": uri,
                      "duration": round(duration, 6)})
    return lines


def write_jsonl(lines: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
