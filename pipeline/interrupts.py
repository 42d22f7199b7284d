"""A job stopped by Ctrl-C (SIGINT) or SIGTERM: within seconds, with one line, and nothing left running.

Python turns SIGINT into a `KeyboardInterrupt` wherever the main thread happens to be, and Ray's core worker
replaces the SIGTERM handler with one that prints a C stack and aborts; either way the user saw a long traceback
and an exit code that says nothing. `stop_on_signals` makes both signals raise `Interrupted` in the main thread
(call it again after `ray.init`, which installs its own; `signals_stop_the_job` around a job restores the handlers
before it when the job returns), a `BaseException`, so that no `except Exception` on the
way (Ray Data's, a stage's error handling) takes it for a failure of the job. The job then calls `wind_down`:
further signals are ignored, Ray is shut down (a private local Ray with every process of it; on a cluster the
driver disconnects and the job's actors end with it), and a watchdog ends the process if that takes longer than
`STOP_S` seconds. Nothing a job committed is lost: parts are atomic (`pipeline/io/sink.py`), so the same command
transcribes the rest.

Exit codes are the shell's for a process ended by a signal: 130 (SIGINT), 143 (SIGTERM).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

STOP_S = 30.0  # the most seconds `wind_down` may take before the process ends anyway
SIGNALS = (signal.SIGINT, signal.SIGTERM)
SIGNAL_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: the job stops (not an error: a `BaseException`, as `KeyboardInterrupt` is)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {SIGNAL_NAMES.get(signum, signum)}")
        self.signum = signum

    @property
    def name(self) -> str:
        return SIGNAL_NAMES.get(self.signum, f"signal {self.signum}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def stop_on_signals() -> None:
    """SIGINT and SIGTERM raise `Interrupted` in the main thread from now on (nothing where this is not the main
    thread: Python runs signal handlers only there)."""
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            signal.signal(signum, _raise_interrupted)


@contextlib.contextmanager
def signals_stop_the_job() -> Iterator[None]:
    """`stop_on_signals` for the job inside, and the handlers before it back after it (a job run in a process that
    goes on, a test's)."""
    main_thread = threading.current_thread() is threading.main_thread()
    before = {signum: signal.getsignal(signum) for signum in SIGNALS} if main_thread else {}
    stop_on_signals()
    try:
        yield
    finally:
        for signum, handler in before.items():
            if handler is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(signum, handler)


def wind_down(interrupted: Interrupted, last_line: str, stop_s: float = STOP_S) -> None:
    """After `Interrupted`: ignore further signals, shut Ray down where this process is connected, all within
    `stop_s` seconds, else print `last_line` and end the process with the signal's exit code at once."""
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            signal.signal(signum, signal.SIG_IGN)

    def give_up() -> None:
        print(last_line, file=sys.stderr, flush=True)
        os._exit(interrupted.exit_code)

    watchdog = threading.Timer(stop_s, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()
    finally:
        watchdog.cancel()
