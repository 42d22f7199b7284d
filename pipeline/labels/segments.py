"""Long transcripts cut into training utterances: segments of at most `max_segment_s`, cut between words.

A transcript row longer than `max_segment_s` (a call, a meeting, a broadcast) is not one training utterance: it
becomes several, each made of whole words, cut where the speaker paused. `plan_segments` decides the cuts from
the row's word times alone (`schema.WORDS`, seconds from the utterance's start):

- the row's words are split recursively at the best gap between two consecutive words until every piece's words
  span at most `max_segment_s`. The best gap is the one with the most non-speech in it where the row has speech
  spans from a voice-activity model, else the widest; ties go to the gap nearest the middle of the piece, so that
  pieces stay balanced. The speech spans are the transcription's
  `schema.SPEECH_SEGMENTS` ({start, end} seconds from the row's start; [start, end] pairs read the same), null
  where the row was not cut by voice activity;
- each segment's audio is its words plus a margin of up to `margin_s` on either side, never past the middle of the
  gap to the neighbouring word (two segments never share audio) nor past the row's ends, and shrunk evenly where
  the margins would make it longer than `max_segment_s`;
- a piece that is one word longer than `max_segment_s` cannot be cut between words: it is returned with
  `too_long` set, and the caller rejects it.

The pseudo-labelling run (`pipeline/labels/runs.py::judge_rows`) cuts at every pause of `SPLIT_PAUSE_S` or more as
well (`split_pause_s`), so that the filters judge a phrase at a time (a 20 s segment's mean confidence hides a bad
sentence among good ones: on the 20-minute benchmark recording the kept text's WER was 23.8% judged by 20 s
segments, 19.6% by phrases), then packs runs of consecutive kept phrases back into segments of at most
`max_segment_s` (`pack_segment_rows`, each packed segment judged again), never across a rejected phrase.

`segment_rows` turns a row and its plan into rows of the same shape as the output's (`schema.OUTPUT_SCHEMA`), so
that the filters (`pipeline/labels/filters.py::judge`) and the manifests judge and write a segment as they do a
whole utterance: its `offset` into the original audio (the row's own offset plus the segment's start), its
`duration`, its words (times from the segment's start), its text (the words joined), its confidence (the mean of
its words', the job's aggregation), and an `utterance_id` of the row's id and the segment's number. The row's
reference text belongs to the whole row, so a segment has none; a hybrid model's head agreement is the row's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline import schema

# a pause at least this long always ends a phrase (the widest gaps of the bundled 20-minute test were the pauses
# between utterances, 0.3-1.5 s; the gaps between words within one rarely reach 0.3 s): docs/pseudo_label.md
SPLIT_PAUSE_S = 0.5
MARGIN_S = 0.3  # audio kept around a segment's words, where the gap to the next word allows (word times are
# whole encoder frames and a word's first frame may come late)
SEGMENT_OF = "segment_of"  # the id of the row a segment was cut from (written in the manifests)


@dataclass(frozen=True)
class Segment:
    """A training utterance cut from a row: its words `words[first_word:stop_word]` and its audio, seconds from
    the row's start."""

    start_s: float
    end_s: float
    first_word: int
    stop_word: int
    too_long: bool = False  # a single word longer than the cap: no cut between words can make it short enough

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def _spans(speech: Sequence[Any] | None) -> list[tuple[float, float]]:
    spans = []
    for span in speech or ():
        start, end = (span["start"], span["end"]) if isinstance(span, dict) else span
        spans.append((float(start), float(end)))
    return sorted(spans)


def _non_speech_s(start_s: float, end_s: float, speech: list[tuple[float, float]]) -> float:
    """Seconds of [start_s, end_s] outside every speech span."""
    if end_s <= start_s:
        return 0.0
    covered = sum(max(0.0, min(end_s, b) - max(start_s, a)) for a, b in speech)
    return max(0.0, (end_s - start_s) - covered)


def plan_segments(word_starts_s: Sequence[float], word_ends_s: Sequence[float], duration_s: float,
                  max_segment_s: float, speech: Sequence[Any] | None = None,
                  margin_s: float = MARGIN_S, split_pause_s: float = 0.0) -> list[Segment]:
    """The segments a row of `duration_s` seconds with these word times is cut into (module docstring); [] where
    it has no words. Times in seconds from the row's start; the segments in order, covering every word once. With
    `split_pause_s`, a gap at least that long (of non-speech, where there are speech spans) is always cut: the
    pieces are then phrases, judged one by one and packed again by `pack_segment_rows`."""
    if max_segment_s <= 0:
        raise ValueError(f"max_segment_s must be > 0, got {max_segment_s}")
    if len(word_starts_s) != len(word_ends_s):
        raise ValueError(f"word_starts_s and word_ends_s must have one entry per word, got {len(word_starts_s)} "
                         f"and {len(word_ends_s)}")
    starts, ends = [float(s) for s in word_starts_s], [float(e) for e in word_ends_s]
    count = len(starts)
    if not count:
        return []
    spans = _spans(speech)

    def gap_score(k: int, first: int, stop: int) -> tuple[float, float, float]:  # the gap before word k
        gap_start, gap_end = ends[k - 1], starts[k]
        middle = (starts[first] + ends[stop - 1]) / 2
        balance = -abs((gap_start + gap_end) / 2 - middle)
        width = gap_end - gap_start
        return (_non_speech_s(gap_start, gap_end, spans) if spans else width, width, balance)

    pieces: list[tuple[int, int]] = []
    pending = [(0, count)]
    while pending:
        first, stop = pending.pop()
        if stop - first == 1:
            pieces.append((first, stop))
            continue
        cut = max(range(first + 1, stop), key=lambda k: gap_score(k, first, stop))
        if ends[stop - 1] - starts[first] <= max_segment_s and not (
                split_pause_s and gap_score(cut, first, stop)[0] >= split_pause_s):
            pieces.append((first, stop))
            continue
        pending += [(cut, stop), (first, cut)]  # the first half is popped first: pieces come out in order
    segments = []
    for first, stop in pieces:
        words_start, words_end = starts[first], ends[stop - 1]
        lower = (ends[first - 1] + starts[first]) / 2 if first > 0 else 0.0
        upper = (ends[stop - 1] + starts[stop]) / 2 if stop < count else max(duration_s, words_end)
        lead = max(0.0, min(margin_s, words_start - lower))
        trail = max(0.0, min(margin_s, upper - words_end))
        spare = max_segment_s - (words_end - words_start)
        too_long = spare < 0
        if not too_long and lead + trail > spare:  # the margins shrink evenly to keep the cap
            lead = min(lead, spare / 2)
            trail = min(trail, spare - lead)
            lead = min(lead, spare - trail)
        start_s = max(0.0, math.ceil((words_start - lead) * 1000 - 1e-6) / 1000)  # whole milliseconds, inside
        end_s = math.floor((words_end + trail) * 1000 + 1e-6) / 1000
        if not too_long and end_s - start_s > max_segment_s:
            end_s = start_s + math.floor(max_segment_s * 1000) / 1000
        segments.append(Segment(start_s=start_s, end_s=max(end_s, start_s), first_word=first, stop_word=stop,
                                too_long=too_long))
    return segments


def segment_rows(row: dict[str, Any], max_segment_s: float, margin_s: float = MARGIN_S, split_pause_s: float = 0.0
                 ) -> list[tuple[dict[str, Any], Segment]]:
    """A transcript row cut into segment rows (module docstring), each with its plan; [] where it has no words."""
    words = row.get(schema.WORDS) or []
    duration_s = row.get(schema.AUDIO_DURATION) or row.get(schema.DURATION) or 0.0
    plan = plan_segments([w["start"] for w in words], [w["end"] for w in words], duration_s, max_segment_s,
                         row.get(schema.SPEECH_SEGMENTS), margin_s, split_pause_s)
    offset_s = float(row.get(schema.OFFSET) or 0.0)
    out = []
    for index, segment in enumerate(plan):
        chosen = words[segment.first_word:segment.stop_word]
        confidences = [w.get("confidence") for w in chosen]
        duration = round(segment.duration_s, 6)
        out.append(({
            **row,
            schema.UTTERANCE_ID: f"{row[schema.UTTERANCE_ID]}-{index:04d}",
            SEGMENT_OF: row[schema.UTTERANCE_ID],
            schema.OFFSET: round(offset_s + segment.start_s, 6),
            schema.DURATION: duration, schema.AUDIO_DURATION: duration,
            schema.TEXT: " ".join(w["word"] for w in chosen),
            schema.WORDS: [{**w, "start": round(w["start"] - segment.start_s, 6),
                            "end": round(w["end"] - segment.start_s, 6)} for w in chosen],
            schema.CONFIDENCE: (None if not confidences or any(c is None for c in confidences)
                                else float(sum(confidences) / len(confidences))),
            schema.REFERENCE_TEXT: None,
        }, segment))
    return out


def merge_segment_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Consecutive segment rows of one transcript (as `segment_rows` made them) as one: from the first's start to
    the last's end, their words in order (times from the new start), the mean confidence of all their words; the
    first's id."""
    first, last = rows[0], rows[-1]
    start_s = first[schema.OFFSET]
    duration = round(last[schema.OFFSET] + last[schema.AUDIO_DURATION] - start_s, 6)
    words = [{**w, "start": round(w["start"] + r[schema.OFFSET] - start_s, 6),
              "end": round(w["end"] + r[schema.OFFSET] - start_s, 6)} for r in rows for w in r[schema.WORDS]]
    confidences = [w.get("confidence") for w in words]
    return {**first, schema.DURATION: duration, schema.AUDIO_DURATION: duration,
            schema.TEXT: " ".join(r[schema.TEXT] for r in rows), schema.WORDS: words,
            schema.CONFIDENCE: (None if not confidences or any(c is None for c in confidences)
                                else float(sum(confidences) / len(confidences)))}


def pack_segment_rows(phrases: list[tuple[dict[str, Any], bool]], max_segment_s: float,
                      accept: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """The kept phrases of one transcript (each with whether it was kept, in order) packed into training
    utterances: runs of consecutive kept phrases merged (`merge_segment_rows`) while the result lasts at most
    `max_segment_s` and `accept` takes it (the filters, judged again on the whole); a rejected phrase ends a run, so
    a packed segment's audio never holds a rejected phrase's."""
    packed: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    for phrase, kept in phrases:
        if not kept:
            if run:
                packed.append(merge_segment_rows(run))
            run = []
            continue
        if run:
            merged = merge_segment_rows([*run, phrase])
            if merged[schema.AUDIO_DURATION] <= max_segment_s and accept(merged):
                run.append(phrase)
                continue
            packed.append(merge_segment_rows(run))
        run = [phrase]
    if run:
        packed.append(merge_segment_rows(run))
    return packed
