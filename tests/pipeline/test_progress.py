"""The progress of a running job (`pipeline/progress.py`): the total counted from the manifests, the percentage, the
rate, the time left and the plain-line format, on updates as `run_transcription` makes them."""

from __future__ import annotations

import io
import json
import re

import pytest

from pipeline.io.sink import committed_ids
from pipeline.io.uris import AudioRoots
from pipeline.progress import Progress, duration_words
from pipeline.totals import RowCounts, count_rows


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def update(rows: int, audio_s: float, wall_s: float, errors: int = 0) -> dict:
    return {"rows": rows, "rows_error": errors, "audio_hours": audio_s / 3600, "wall_s": wall_s}


def progress_with(counts: RowCounts | None, interval_s: float = 5.0) -> tuple[Progress, io.StringIO, Clock]:
    stream, clock = io.StringIO(), Clock()
    progress = Progress(stream, interval_s=interval_s, tty=False, clock=clock)
    progress.counts = counts
    return progress, stream, clock


def test_a_line_gives_the_total_percentage_rate_and_time_left_from_the_first_update():
    progress, stream, clock = progress_with(RowCounts(rows=3000, rows_committed=0, rows_to_commit=3000,
                                                      audio_s_to_transcribe=9000.0, rows_without_duration=0))
    clock.now += 40  # 30 s of start-up, then 10 s of decoding
    progress(update(rows=100, audio_s=300.0, wall_s=40.0, errors=2))
    line = stream.getvalue().strip()
    assert re.fullmatch(r"loopscribe: \d\d:\d\d:\d\d committed 100 of 3,000 rows \(3\.3%\), 0\.08 of 2\.50 h of "
                        r"audio, 2 error rows, 7\.5x real time, 2\.5 rows/s, 19 min 20 s left", line), line


def test_the_time_left_after_a_fifth_of_the_audio_is_within_a_quarter_of_the_real_time_left():
    """A job whose start-up takes as long as a fifth of its decoding: the rate since the start would say 2x too much,
    the recent rate is right."""
    total_s, part_s, rtfx, startup_s = 36_000.0, 360.0, 60.0, 120.0
    progress, _, clock = progress_with(RowCounts(10_000, 0, 10_000, total_s, 0))
    start, done_s = clock.now, 0.0
    clock.now += startup_s
    while done_s < 0.2 * total_s:
        clock.now += part_s / rtfx
        done_s += part_s
        progress(update(rows=int(done_s / 3.6), audio_s=done_s, wall_s=clock.now - start))
    real_left_s = (total_s - done_s) / rtfx
    eta = progress.eta_s(update(rows=int(done_s / 3.6), audio_s=done_s, wall_s=clock.now - start))
    assert abs(eta - real_left_s) <= 0.25 * real_left_s, (eta, real_left_s)


def test_lines_come_at_most_once_an_interval_and_the_last_one_always():
    progress, stream, clock = progress_with(RowCounts(40, 0, 40, 400.0, 0), interval_s=5.0)
    for part in range(1, 5):
        clock.now += 1.0
        progress(update(rows=10 * part, audio_s=100.0 * part, wall_s=float(part)))
    assert len(stream.getvalue().splitlines()) == 1
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "40 of 40 rows (100.0%)" in lines[-1] and lines[-1].endswith("done")


def test_without_durations_the_percentage_is_by_rows_and_before_the_count_it_says_so():
    progress, stream, _ = progress_with(None, interval_s=0.0)
    progress(update(rows=5, audio_s=15.0, wall_s=10.0))
    assert "5 rows (counting the manifests), 15.0 s of audio" in stream.getvalue()
    progress.counts = RowCounts(20, 0, 20, 40.0, rows_without_duration=3)
    progress(update(rows=10, audio_s=30.0, wall_s=20.0))
    assert "10 of 20 rows (50.0%), 30.0 s of audio" in stream.getvalue().splitlines()[-1]


def test_a_rerun_says_what_earlier_runs_committed_and_counts_the_rest():
    progress, stream, _ = progress_with(RowCounts(3000, 2000, 1000, 3600.0, 0), interval_s=0.0)
    progress(update(rows=100, audio_s=360.0, wall_s=30.0))
    first, second = stream.getvalue().splitlines()
    assert first == ("loopscribe: 2,000 of 3,000 rows were committed by earlier runs; transcribing the other 1,000 "
                     "(1.00 h of audio)")
    assert "100 of 1,000 rows (10.0%)" in second


def test_on_a_terminal_it_is_a_bar_redrawn_in_place():
    stream = io.StringIO()
    progress = Progress(stream, tty=True, clock=Clock())
    progress.counts = RowCounts(10, 0, 10, 100.0, 0)
    progress(update(rows=5, audio_s=50.0, wall_s=5.0))
    progress(update(rows=10, audio_s=100.0, wall_s=10.0))
    progress.close()
    assert "\r" in stream.getvalue() and "100%|" in stream.getvalue() and "10 of 10 rows" in stream.getvalue()


def test_the_count_is_what_the_run_commits(tmp_path):
    manifest = tmp_path / "m.json"
    lines = [json.dumps({"audio_filepath": f"/audio/{i}.flac", "duration": 2.0}) for i in range(6)]
    lines += ["{not json", json.dumps({"audio_filepath": "/audio/nodur.flac"})]
    manifest.write_text("\n".join(lines) + "\n")
    counts = count_rows([str(manifest)], {}, committed_ids(str(tmp_path / "no-output")), AudioRoots(()))
    # both bad lines are error rows (a NeMo line must give its duration): output rows with no audio to transcribe
    assert counts == RowCounts(rows=8, rows_committed=0, rows_to_commit=8, audio_s_to_transcribe=12.0,
                               rows_without_duration=0)
    limited = count_rows([str(manifest)], {str(manifest): 3}, committed_ids(str(tmp_path / "no-output")),
                         AudioRoots(()))
    assert limited.rows_to_commit == 3 and limited.audio_s_to_transcribe == 6.0


@pytest.mark.parametrize(("seconds", "words"), [(0.4, "0 s"), (45, "45 s"), (750, "12 min 30 s"),
                                                (4 * 3600 + 300, "4 h 05 min")])
def test_durations_in_words(seconds, words):
    assert duration_words(seconds) == words


def test_parts_committed_in_a_burst_are_timed_by_the_asr_stages_busy_seconds_not_the_start_up():
    """The ASR stage hands a whole window of rows on at once, so the first fifth of a job commits within a second,
    after a start-up as long as the decoding: the time left comes from the seconds the ASR workers were busy."""
    total_s, startup_s, decode_rate = 3600.0, 60.0, 30.0  # 2 ASR workers, each decoding 15 s of audio a second
    progress, stream, clock = progress_with(RowCounts(1000, 0, 1000, total_s, 0), interval_s=0.0)
    progress.asr_workers = 2
    first_commit = clock.now + startup_s + 0.2 * total_s / decode_rate

    def busy(audio_s: float) -> dict:  # the two workers' seconds, split between the encoder and decoding
        return {"encoder": 2 * audio_s / decode_rate * 0.8, "decoding": 2 * audio_s / decode_rate * 0.2}

    for part in range(1, 5):  # four parts committed within 0.3 s
        audio_s = 0.05 * total_s * part
        progress(update(rows=50 * part, audio_s=audio_s, wall_s=first_commit - clock.now + 0.1 * part) | {
            "last_commit_at": first_commit + 0.1 * part, "busy_s": busy(audio_s)})
    eta = progress.eta_s(update(rows=200, audio_s=0.2 * total_s, wall_s=startup_s + 24.0) | {
        "busy_s": busy(0.2 * total_s)})
    real_left_s = 0.8 * total_s / decode_rate
    assert eta == pytest.approx(real_left_s, rel=0.01), (eta, real_left_s)
    assert stream.getvalue().splitlines()[-1].endswith("1 min 36 s left")
