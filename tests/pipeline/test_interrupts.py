"""`pipeline/interrupts.py`: SIGINT and SIGTERM raise `Interrupted` inside a job and the handlers before it come back
after it; a Ray shutdown that hangs cannot hold the process: the watchdog prints the line and exits with the
signal's code. (The whole job, stopped both ways, is tests/jobs/test_transcribe_interrupts.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.interrupts import Interrupted, signals_stop_the_job

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("signum, name, exit_code", [(signal.SIGINT, "Ctrl-C", 130), (signal.SIGTERM, "SIGTERM", 143)])
def test_a_signal_inside_the_job_is_interrupted_and_the_handlers_come_back(signum, name, exit_code):
    before = signal.getsignal(signum)
    with pytest.raises(Interrupted) as caught:
        with signals_stop_the_job():
            os.kill(os.getpid(), signum)
            for _ in range(100):  # the handler runs in this thread at the next bytecode
                time.sleep(0.05)
    assert caught.value.name == name and caught.value.exit_code == exit_code
    assert not isinstance(caught.value, Exception)  # no `except Exception` on the way takes it for a failure
    assert signal.getsignal(signum) is before


HANGING_SHUTDOWN = """
import sys, time, types
sys.path.insert(0, {repo!r})
from pipeline.interrupts import Interrupted, wind_down
ray = types.ModuleType("ray")
ray.is_initialized = lambda: True
ray.shutdown = lambda: time.sleep(60)
sys.modules["ray"] = ray
wind_down(Interrupted(15), "loopscribe: stopped (SIGTERM); the same command finishes the rest", stop_s=1.0)
print("not reached")
"""


def test_a_shutdown_that_hangs_ends_with_the_line_and_the_signals_code():
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", HANGING_SHUTDOWN.format(repo=str(REPOSITORY))],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 143 and time.monotonic() - started < 30
    assert result.stderr.strip() == "loopscribe: stopped (SIGTERM); the same command finishes the rest"
    assert "not reached" not in result.stdout
