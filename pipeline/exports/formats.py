"""The export formats, one function each: a recording (or a row) in, the text of its file out.

- `srt`: SubRip, written with the `srt` library: numbered cues, `HH:MM:SS,mmm` times, lines as cut by `cues.py`.
- `vtt`: WebVTT, written with `webvtt-py`: the `WEBVTT` header, `HH:MM:SS.mmm` times; `&`, `<` and `>` escaped as
  the format requires (unescaped, a `<` starts a tag and `-->` a timing line).
- `txt`: the recording's text, one row (segment) a line, in time order.
- `nemo`: one JSON line per row, as NeMo's `transcribe_speech.py` writes for a manifest: the manifest's keys
  (`audio_filepath`, `duration`, `offset` where not 0, its reference as `text`, its own id as `id`, every other key
  it had) and the transcript as `pred_text`. A local audio path is written absolute, so the manifest reads the same
  wherever it is stored; a URI as it is.
- `ctm`: NIST's time-marked conversation format, one word a line: `<recording> <channel> <start> <duration> <word>
  <confidence>`, the recording the name of its file (`transcripts.py`), the channel `1` (mixed down, or a mono file)
  or the channel's index + 1, times in seconds from the recording's start to the millisecond, the confidence only
  where the output has one, lines sorted by recording, channel and start as sclite and hubscr expect.

Times are whole milliseconds in every format (rounded).
"""

from __future__ import annotations

import datetime
import html
import json
import os
from collections.abc import Iterable
from typing import Any

from pipeline.exports.cues import Cue, CueRules, TimedWord, hold, split_cues
from pipeline.exports.transcripts import Recording, Utterance
from pipeline.io.uris import local_path

PER_RECORDING = ("srt", "vtt", "txt")  # one file per recording, named after it
SINGLE_FILE = ("nemo", "ctm")  # one file for the whole output
FORMATS = PER_RECORDING + SINGLE_FILE
SUFFIX = {"srt": ".srt", "vtt": ".vtt", "txt": ".txt", "nemo": ".json", "ctm": ".ctm"}


def milliseconds(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def recording_cues(recording: Recording, rules: CueRules) -> list[Cue]:
    """Every row's cues (`split_cues`: a row boundary ends a cue), in start order, held on screen (`hold`)."""
    cues = [cue for utterance in recording.utterances for cue in split_cues(utterance_words(utterance), rules)]
    return hold(sorted(cues, key=lambda cue: cue.start_s), rules.min_cue_s)


def utterance_words(utterance: Utterance) -> Iterable[TimedWord]:
    """The row's words; a row with text but no word times (none recorded) spreads its words evenly over its audio,
    so that no transcript is left out of a subtitle."""
    if utterance.words or not utterance.text.strip():
        return utterance.words
    texts = utterance.text.split()
    length_s = utterance.audio_duration_s or utterance.duration_s or 0.0
    step_s = length_s / len(texts)
    return [TimedWord(text, utterance.offset_s + i * step_s, utterance.offset_s + (i + 1) * step_s)
            for i, text in enumerate(texts)]


def srt_text(cues: list[Cue]) -> str:
    import srt

    return srt.compose([srt.Subtitle(index, datetime.timedelta(milliseconds=milliseconds(cue.start_s)),
                                     datetime.timedelta(milliseconds=milliseconds(cue.end_s)), cue.text)
                        for index, cue in enumerate(cues, 1)])


def vtt_time(seconds: float) -> str:
    total = milliseconds(seconds)
    hours, rest = divmod(total, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}.{rest % 1000:03d}"


def vtt_text(cues: list[Cue]) -> str:
    import webvtt

    document = webvtt.WebVTT(captions=[webvtt.Caption(vtt_time(cue.start_s), vtt_time(cue.end_s),
                                                      [html.escape(line, quote=False) for line in cue.lines])
                                       for cue in cues])
    return document.content


def txt_text(recording: Recording) -> str:
    lines = [utterance.text.strip() for utterance in recording.utterances if utterance.text.strip()]
    return "".join(line + "\n" for line in lines)


def recording_file(recording: Recording, format_name: str, rules: CueRules) -> str:
    """The text of the recording's file in one of `PER_RECORDING`."""
    if format_name == "txt":
        return txt_text(recording)
    cues = recording_cues(recording, rules)
    return srt_text(cues) if format_name == "srt" else vtt_text(cues)


def absolute_audio(audio_filepath: str) -> str:
    path = local_path(audio_filepath)
    return audio_filepath if path is None else os.path.abspath(path)


def nemo_line(utterance: Utterance) -> str:
    """The row as a line of a NeMo manifest with `pred_text` (module docstring)."""
    line: dict[str, Any] = {"audio_filepath": absolute_audio(utterance.audio_filepath),
                            "duration": utterance.duration_s or utterance.audio_duration_s or 0.0}
    if utterance.offset_s:
        line["offset"] = utterance.offset_s
    if utterance.reference_text:
        line["text"] = utterance.reference_text
    if utterance.source_id is not None and "id" not in utterance.extra:
        line["id"] = utterance.source_id
    line.update({key: value for key, value in utterance.extra.items() if key not in line})
    line["pred_text"] = utterance.text
    return json.dumps(line, ensure_ascii=False) + "\n"


def ctm_channel(channel: int | None) -> str:
    return "1" if channel is None else str(channel + 1)


def ctm_lines(recording: Recording) -> str:
    """The recording's words as CTM lines, in start order (module docstring)."""
    words = sorted((word for utterance in recording.utterances for word in utterance.words),
                   key=lambda word: word.start_s)
    channel = ctm_channel(recording.channel)
    lines = []
    for word in words:
        start_ms = milliseconds(word.start_s)
        duration_ms = max(0, milliseconds(word.end_s) - start_ms)
        line = f"{recording.name} {channel} {start_ms / 1000:.3f} {duration_ms / 1000:.3f} {word.text}"
        if word.confidence is not None:
            line += f" {min(max(word.confidence, 0.0), 1.0):.4f}"
        lines.append(line + "\n")
    return "".join(lines)
