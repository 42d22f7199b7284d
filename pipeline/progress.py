"""A running job's progress on the driver's console (`Progress`).

Each committed part updates it with the run's totals so far (`pipeline/stages/rows.py::summarize`); it shows rows and
audio done of what this run will commit, a percentage, error rows, the rate (times real time and rows a second)
and an estimate of the time left from the recent rate. The total is counted from the manifests while the job
starts (`pipeline/totals.py::count_rows`, in a thread: it costs the job no time), so it is there from the first
update of any corpus that counts within a job's start-up; until then an update says it is counting. A rerun says
once how many rows earlier runs committed, and counts only the rest.

On a terminal the update is a live bar (tqdm) redrawn in place; otherwise (`ray job logs`, a file, a pipe) a
plain timestamped line, at most one every `interval_s` seconds and the last one always.

The estimate, in audio seconds where the manifests give every row's duration, else in rows, at the time each part
was committed (the writers' clock: the driver may receive parts in bursts): the rate over the last `RATE_WINDOW_S`
seconds of commits, once they span `MIN_RATE_SPAN_S`; before that (the first window of rows comes out of the ASR
stage at once), the rate the ASR stage decodes at, from the seconds its workers were busy on the rows committed
(start-up left out: on a short job it is most of the time); without those, the rate since the run started.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import IO, Any

from pipeline.totals import RowCounts

RATE_WINDOW_S = 300.0  # commits the rate is measured over, seconds back from the latest
MIN_RATE_SPAN_S = 15.0  # commits spanning less give no rate of their own
LINE_INTERVAL_S = 5.0  # at most one plain line this often


def duration_words(seconds: float) -> str:
    """4 h 05 min, 12 min 30 s, 45 s."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


class Progress:
    """The progress of one run: `count_in_background(count)` when it starts, then call it with each update (the run's
    totals so far: rows, rows_error, audio_hours, wall_s), and `close()` at the end."""

    def __init__(self, stream: IO[str] | None = None, interval_s: float = LINE_INTERVAL_S, tty: bool | None = None,
                 clock: Callable[[], float] = time.time, asr_workers: int = 1) -> None:
        self.stream = stream or sys.stdout
        self.asr_workers = asr_workers  # the ASR stage's actors: its busy seconds over them are its wall time
        self.interval_s = interval_s
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self.counts: RowCounts | None = None
        self._counting: threading.Thread | None = None
        self._history: deque[tuple[float, int, float]] = deque()  # (time, rows, audio seconds) at each commit
        self._last_line_at = -float("inf")
        self._pending: dict[str, Any] | None = None  # the latest update not printed yet (throttled)
        self._bar: Any = None
        self._told_committed = False

    # --- totals ------------------------------------------------------------------------------------------------
    def count_in_background(self, count: Callable[[], RowCounts]) -> None:
        """Count the run's rows with `count` in a thread (a count that fails leaves the progress without a total)."""
        def run() -> None:
            try:
                self.counts = count()
            except Exception:  # the job reads the same manifests and reports their problems itself
                self.counts = None

        self._counting = threading.Thread(target=run, name="count-rows", daemon=True)
        self._counting.start()

    def wait_for_count(self, timeout_s: float) -> None:
        if self._counting is not None:
            self._counting.join(timeout_s)

    @property
    def audio_total_s(self) -> float | None:
        """The audio seconds this run will transcribe, where the manifests give every row's duration."""
        counts = self.counts
        if counts is None or counts.rows_without_duration or counts.audio_s_to_transcribe <= 0:
            return None
        return counts.audio_s_to_transcribe

    # --- updates -----------------------------------------------------------------------------------------------
    def __call__(self, done: dict[str, Any]) -> None:
        now = self.clock()
        self._history.append((done.get("last_commit_at") or now, done["rows"], done["audio_hours"] * 3600))
        while len(self._history) > 2 and self._history[1][0] < now - RATE_WINDOW_S:
            self._history.popleft()
        self._tell_committed()
        if self.tty:
            self._draw(done)
        elif now - self._last_line_at >= self.interval_s:
            self._print_line(done, now)
        else:
            self._pending = done

    def close(self) -> None:
        """The last update, if it was held back; the bar closed."""
        if self._pending is not None and not self.tty:
            self._print_line(self._pending, self.clock())
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _tell_committed(self) -> None:
        counts = self.counts
        if counts is None or self._told_committed:
            return
        self._told_committed = True
        if counts.rows_committed:
            audio = self.audio_total_s
            print(f"loopscribe: {counts.rows_committed:,} of {counts.rows:,} rows were committed by earlier runs; "
                  f"transcribing the other {counts.rows_to_commit:,}"
                  + (f" ({audio / 3600:.2f} h of audio)" if audio is not None else ""), file=self.stream,
                  flush=True)

    def _print_line(self, done: dict[str, Any], now: float) -> None:
        self._pending = None
        self._last_line_at = now
        stamp = time.strftime("%H:%M:%S", time.localtime(now))
        print(f"loopscribe: {stamp} committed {self.text(done)}", file=self.stream, flush=True)

    def _draw(self, done: dict[str, Any]) -> None:
        from tqdm import tqdm

        fraction = self.fraction(done)
        if self._bar is None:
            self._bar = tqdm(total=1000, file=self.stream, leave=True, dynamic_ncols=True,
                             bar_format="loopscribe: {percentage:3.0f}%|{bar}| {postfix}")
        self._bar.n = round(1000 * fraction) if fraction is not None else 0
        self._bar.set_postfix_str(self.text(done), refresh=True)

    # --- figures -----------------------------------------------------------------------------------------------
    def fraction(self, done: dict[str, Any]) -> float | None:
        """How much of the run is done (by audio where the total is known, else by rows); None without a total."""
        if self.counts is not None and done["rows"] >= self.counts.rows_to_commit:
            return 1.0  # (the audio measured can differ a little from the manifests' durations)
        if self.audio_total_s is not None:
            return min(1.0, done["audio_hours"] * 3600 / self.audio_total_s)
        if self.counts is not None and self.counts.rows_to_commit:
            return min(1.0, done["rows"] / self.counts.rows_to_commit)
        return None

    def eta_s(self, done: dict[str, Any]) -> float | None:
        """Seconds left at the recent rate (None without a total or a rate)."""
        fraction = self.fraction(done)
        if fraction is None:
            return None
        by_audio = self.audio_total_s is not None
        (first_at, first_rows, first_audio_s), (last_at, last_rows, last_audio_s) = self._history[0], self._history[-1]
        left = self.audio_total_s - last_audio_s if by_audio else self.counts.rows_to_commit - last_rows
        if left <= 0 or fraction >= 1.0:
            return 0.0
        busy = done.get("busy_s") or {}
        asr_s = (busy.get("encoder", 0.0) + busy.get("decoding", 0.0)) / max(1, self.asr_workers)
        if last_at - first_at >= MIN_RATE_SPAN_S:  # the recent rate
            rate = ((last_audio_s - first_audio_s) if by_audio else (last_rows - first_rows)) / (last_at - first_at)
        elif asr_s > 0:  # the ASR stage's rate, start-up left out
            rate = (last_audio_s if by_audio else last_rows) / asr_s
        elif done["wall_s"] > 0:  # the rate since the run started
            rate = (last_audio_s if by_audio else last_rows) / done["wall_s"]
        else:
            return None
        return left / rate if rate > 0 else None

    def text(self, done: dict[str, Any]) -> str:
        """"1,234 of 3,000 rows (41.1%), 0.52 of 1.27 h of audio, 3 error rows, 45.2x real time, 12.3 rows/s, 4 min
        10 s left"."""
        audio_h = done["audio_hours"]
        parts = []
        fraction = self.fraction(done)
        if self.counts is not None:
            rows = f"{done['rows']:,} of {self.counts.rows_to_commit:,} rows"
            parts.append(f"{rows} ({100 * fraction:.1f}%)" if fraction is not None else rows)
        else:
            parts.append(f"{done['rows']:,} rows (counting the manifests)")
        total = self.audio_total_s
        if total is not None and total < 360:
            parts.append(f"{audio_h * 3600:.1f} of {total:.1f} s of audio")
        elif total is not None:
            parts.append(f"{audio_h:.2f} of {total / 3600:.2f} h of audio")
        else:
            parts.append(f"{audio_h * 3600:.1f} s of audio" if audio_h < 0.1 else f"{audio_h:.2f} h of audio")
        parts.append(f"{done['rows_error']:,} error rows")
        if done["wall_s"] > 0:
            parts.append(f"{audio_h * 3600 / done['wall_s']:.1f}x real time, {done['rows'] / done['wall_s']:.1f} "
                         "rows/s")
        eta = self.eta_s(done)
        if eta is not None:
            parts.append("done" if eta == 0 else f"{duration_words(eta)} left")
        return ", ".join(parts)


__all__ = ["LINE_INTERVAL_S", "MIN_RATE_SPAN_S", "Progress", "RATE_WINDOW_S", "duration_words"]
