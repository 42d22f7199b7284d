"""Long transcripts cut into training utterances (`pipeline/labels/segments.py`) and judged per segment
(`pipeline/labels/runs.py::judge_rows`): the cap, where the cuts go (the widest pauses, or non-speech where the row
has speech spans), margins that never overlap a neighbour, times into the original audio, each segment filtered
on its own."""

from __future__ import annotations

import pytest

from pipeline import schema
from pipeline.labels.filters import LabelFilters, nemo_line, rejected_line
from pipeline.labels.runs import judge_rows
from pipeline.labels.segments import SEGMENT_OF, plan_segments, segment_rows

SENTENCES = [["the", "tree", "split", "with", "a", "great", "ripping", "sound"],
             ["freedom", "is", "nothing", "else", "but", "the", "chance", "to", "do", "better"],
             ["she", "sells", "sea", "shells", "by", "the", "sea", "shore"],
             ["a", "stitch", "in", "time", "saves", "nine"],
             ["all", "that", "glitters", "is", "not", "gold"]]


def words_of(sentences, pauses_s, word_s=0.4, gap_s=0.1, start_s=0.5, confidences=None):
    """Words said one after another: `gap_s` between the words of a sentence, `pauses_s[k]` after sentence k."""
    words, t = [], start_s
    for k, sentence in enumerate(sentences):
        for word in sentence:
            confidence = confidences[k] if confidences else 0.9
            words.append({"word": word, "start": round(t, 6), "end": round(t + word_s, 6), "confidence": confidence})
            t += word_s + gap_s
        t += pauses_s[k] - gap_s if k < len(pauses_s) else 0.0
    return words, t + 0.5


def row_of(words, duration_s, offset_s=0.0, **more):
    return {schema.UTTERANCE_ID: "abc123", schema.AUDIO_FILEPATH: "/data/long.flac", schema.OFFSET: offset_s,
            schema.DURATION: duration_s, schema.AUDIO_DURATION: duration_s, schema.STATUS: schema.STATUS_OK,
            schema.ERROR: "", schema.TEXT: " ".join(w["word"] for w in words), schema.WORDS: words,
            schema.CONFIDENCE: 0.9, schema.REFERENCE_TEXT: "the whole row's reference", schema.CHANNEL: None,
            **more}


def test_cuts_go_in_the_widest_pauses_cover_every_word_once_and_keep_the_cap():
    words, duration = words_of(SENTENCES, pauses_s=[1.2, 0.6, 1.5, 0.9])
    starts, ends = [w["start"] for w in words], [w["end"] for w in words]
    for cap in (6.0, 9.0, 12.0, 20.0):
        segments = plan_segments(starts, ends, duration, cap)
        assert [s.first_word for s in segments] == [0] + [s.stop_word for s in segments[:-1]]
        assert segments[-1].stop_word == len(words)
        assert all(0 < s.duration_s <= cap and not s.too_long for s in segments)
        # the audio of consecutive segments never overlaps, and a segment holds its words whole
        assert all(a.end_s <= b.start_s for a, b in zip(segments, segments[1:]))
        assert all(s.start_s <= starts[s.first_word] and ends[s.stop_word - 1] <= s.end_s for s in segments)
        sentence_starts = {sum(map(len, SENTENCES[:k])) for k in range(len(SENTENCES))}
        assert {s.first_word for s in segments} <= sentence_starts, f"cut inside a sentence at cap {cap}"
    # 9 s: the widest pause (1.5 s, after the third sentence) is cut first, then the 1.2 s one (after the first),
    # then the 0.6 s one (the second and third, 9.4 s, do not fit); the last two (6.9 s) stay together
    assert [s.first_word for s in plan_segments(starts, ends, duration, 9.0)] == [0, 8, 18, 26]
    # a row short enough is one segment, its words with their margins
    (whole,) = plan_segments(starts[:8], ends[:8], ends[7] + 2.0, 20.0)
    assert (whole.start_s, whole.end_s) == (pytest.approx(0.2), pytest.approx(ends[7] + 0.3))


def test_speech_spans_move_the_cut_into_non_speech():
    # two sentences joined by a 0.6 s gap the VAD calls speech (a hesitation), and a 0.4 s gap it calls silence
    words, duration = words_of(SENTENCES[:3], pauses_s=[0.6, 0.4])
    starts, ends = [w["start"] for w in words], [w["end"] for w in words]
    by_width = plan_segments(starts, ends, duration, 10.0)
    assert [s.first_word for s in by_width] == [0, 8]  # the widest gap, after the first sentence
    second_pause = (ends[17], starts[18])
    speech = [{"start": 0.0, "end": second_pause[0] + 0.05}, {"start": second_pause[1] - 0.05, "end": duration}]
    by_speech = plan_segments(starts, ends, duration, 10.0, speech=speech)
    assert [s.first_word for s in by_speech] == [0, 18]
    pairs = [(span["start"], span["end"]) for span in speech]  # [start, end] pairs read the same
    assert plan_segments(starts, ends, duration, 10.0, speech=pairs) == by_speech


def test_margins_stop_at_the_middle_of_a_gap_and_shrink_to_keep_the_cap():
    starts, ends = [1.0, 1.55, 5.0], [1.5, 4.9, 9.9]  # 0.1 s from the second word to the third
    segments = plan_segments(starts, ends, 11.0, 5.0)
    assert [(s.first_word, s.stop_word) for s in segments] == [(0, 2), (2, 3)]
    first, second = segments
    assert first.start_s == pytest.approx(0.7) and first.end_s == pytest.approx(4.95)  # the gap's middle
    assert second.start_s == pytest.approx(4.95) and second.end_s <= 9.9 + 0.3
    assert second.duration_s <= 5.0 and second.start_s <= 5.0 and second.end_s >= 9.9
    # 4.95 s of words under a 5 s cap: 0.05 s of margin, split between the two sides
    (tight,) = plan_segments([2.0], [6.95], 10.0, 5.0)
    assert tight.duration_s <= 5.0 and tight.start_s <= 2.0 and tight.end_s >= 6.95


def test_a_word_longer_than_the_cap_cannot_be_cut():
    segments = plan_segments([0.5, 1.5], [1.0, 30.0], 31.0, 20.0)
    assert [s.too_long for s in segments] == [False, True]
    assert plan_segments([], [], 30.0, 20.0) == []
    with pytest.raises(ValueError, match="max_segment_s"):
        plan_segments([0.0], [1.0], 2.0, 0.0)


def test_segments_point_into_the_original_audio_and_are_judged_one_by_one():
    confidences = [0.9, 0.1, 0.9, 0.9, 0.9]  # the second sentence: the model was unsure
    words, duration = words_of(SENTENCES, pauses_s=[1.2, 1.2, 1.2, 1.2], confidences=confidences)
    row = row_of(words, duration, offset_s=100.0)
    pieces = segment_rows(row, 6.0)
    assert len(pieces) == 5
    for (segment_row, segment), sentence in zip(pieces, SENTENCES):
        assert segment_row[schema.TEXT] == " ".join(sentence)
        assert segment_row[schema.OFFSET] == pytest.approx(100.0 + segment.start_s)
        assert segment_row[schema.AUDIO_DURATION] == pytest.approx(segment.duration_s) and segment.duration_s <= 6.0
        assert segment_row[SEGMENT_OF] == "abc123" and segment_row[schema.REFERENCE_TEXT] is None
        # words from the segment's start: the first word starts after the margin, inside the segment
        first = segment_row[schema.WORDS][0]
        assert 0 < first["start"] <= 0.3 + 1e-9 and segment_row[schema.WORDS][-1]["end"] <= segment.duration_s
        original = words[segment.first_word]
        assert segment_row[schema.OFFSET] + first["start"] == pytest.approx(100.0 + original["start"])
    line = nemo_line(pieces[2][0])
    assert line["offset"] == pytest.approx(100.0 + pieces[2][1].start_s) and "orig_text" not in line

    # a sentence repeated in a loop, inside a row that is otherwise fine
    looping = SENTENCES[:2] + [["go", "go", "go", "go", "go"]] + SENTENCES[3:]
    loop_words, loop_duration = words_of(looping, pauses_s=[1.2, 1.2, 1.2, 1.2], confidences=confidences)
    short_words, short_duration = words_of(SENTENCES[:1], pauses_s=[])
    no_words = {**row_of([], 60.0), schema.UTTERANCE_ID: "nowords", schema.TEXT: "something"}
    rows = [row, {**row_of(loop_words, loop_duration), schema.UTTERANCE_ID: "loop"},
            {**row_of(short_words, short_duration), schema.UTTERANCE_ID: "short"}, no_words]
    units, kept, rejected, segmented, written = judge_rows(rows, LabelFilters(min_confidence=0.5), max_segment_s=6.0)
    assert segmented == 2 and len(units) == 5 + 5 + 1 + 1
    reasons = {r[schema.UTTERANCE_ID]: reason for r, reason in rejected}
    assert reasons["abc123-0001"].startswith("confidence 0.100 < 0.5")
    assert reasons["loop-0001"].startswith("confidence") and reasons["loop-0002"].startswith("repetition")
    assert reasons["nowords"].startswith("segmenting:") and "no word times" in reasons["nowords"]
    assert {r[schema.UTTERANCE_ID] for r in kept} == {"abc123-0000", "abc123-0002", "abc123-0003", "abc123-0004",
                                                     "loop-0000", "loop-0003", "loop-0004", "short"}
    assert "offset" in rejected_line(*rejected[0])
    assert written == kept  # no two kept sentences in a row fit in 6 s together
    # 0 turns cutting off: the long rows are judged whole (and fail the 40 s duration filter)
    units, kept, rejected, segmented, written = judge_rows(rows, LabelFilters(min_confidence=0.5), max_segment_s=0)
    assert segmented == 0 and len(units) == 4 and written == kept


def test_kept_phrases_are_packed_up_to_the_cap_and_never_across_a_rejected_one():
    """Phrases (cut at every pause of SPLIT_PAUSE_S or more) are judged one by one, then runs of kept ones are
    merged again into segments of at most the cap: the filter sees a sentence at a time, training gets long
    utterances, and no segment's audio holds a rejected phrase."""
    confidences = [0.9, 0.1, 0.9, 0.9, 0.9]
    words, duration = words_of(SENTENCES, pauses_s=[1.2, 1.2, 1.2, 1.2], confidences=confidences)
    row = row_of(words, duration, offset_s=100.0)
    units, kept, rejected, segmented, written = judge_rows([row], LabelFilters(min_confidence=0.5), 20.0)
    assert len(units) == 5 and [r[schema.UTTERANCE_ID] for r, _ in rejected] == ["abc123-0001"]
    assert [w[schema.UTTERANCE_ID] for w in written] == ["abc123-0000", "abc123-0002"]
    first, packed = written
    assert first[schema.TEXT] == " ".join(SENTENCES[0])
    assert packed[schema.TEXT] == " ".join(" ".join(s) for s in SENTENCES[2:])
    assert packed[schema.OFFSET] == kept[1][schema.OFFSET]
    assert packed[schema.OFFSET] + packed[schema.AUDIO_DURATION] == pytest.approx(
        kept[3][schema.OFFSET] + kept[3][schema.AUDIO_DURATION])
    assert packed[schema.AUDIO_DURATION] <= 20.0
    assert packed[schema.CONFIDENCE] == pytest.approx(0.9)
    for word in packed[schema.WORDS]:  # the packed words keep their times in the original audio
        original = [w for w in words if w["word"] == word["word"] and
                    abs(w["start"] + 100.0 - (packed[schema.OFFSET] + word["start"])) < 1e-6]
        assert len(original) == 1
    # a tighter cap packs fewer together
    _, _, _, _, tighter = judge_rows([row], LabelFilters(min_confidence=0.5), 9.0)
    assert [w[schema.UTTERANCE_ID] for w in tighter] == ["abc123-0000", "abc123-0002", "abc123-0004"]
    assert all(w[schema.AUDIO_DURATION] <= 9.0 for w in tighter)


def test_a_speech_column_on_the_row_is_used():
    words, duration = words_of(SENTENCES[:3], pauses_s=[0.6, 0.4])
    gap = (words[17]["end"], words[18]["start"])
    speech = [[0.0, gap[0]], [gap[1], duration]]
    without = [s.first_word for _, s in segment_rows(row_of(words, duration), 10.0)]
    row = row_of(words, duration, **{schema.SPEECH_SEGMENTS: speech})
    with_speech = [s.first_word for _, s in segment_rows(row, 10.0)]
    assert without == [0, 8] and with_speech == [0, 18]


def test_the_labelling_job_takes_the_transcription_segmentation_and_refuses_a_vad_that_cannot_load(tmp_path,
                                                                                                    monkeypatch):
    import sys

    from jobs.pseudo_label import config_from_args, parser
    from pipeline.labels.runs import LabelError, prepare_label_run

    args = ["--output", str(tmp_path), "--manifest", "m.json", "--model", str(tmp_path / "absent.nemo")]
    assert config_from_args(parser().parse_args(args)).segment == "vad"
    assert config_from_args(parser().parse_args([*args, "--segment", "pauses"])).segment == "pauses"
    fake = tmp_path / "site" / "silero_vad"  # a silero-vad without its model file, found first
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('never imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "silero_vad", raising=False)  # imported by the tests comparing with silero
    with pytest.raises(LabelError, match="--segment vad: silero-vad is installed without its data/silero_vad.onnx"):
        prepare_label_run(config_from_args(parser().parse_args(args)))  # before the (absent) model is fetched
