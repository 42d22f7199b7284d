"""One fetch per node: processes (as a node's ASR and writer actors are) fetching one remote model at the same time
download it once and share one blob; one killed mid-download leaves no blob and does not block the next; a model
file is hashed once per version on a node, whichever actors ask.

Real processes (multiprocessing, spawned as Ray starts its workers) against a real http server on 127.0.0.1
(`tests/support/file_server.py`, which records every request), served slowly so that the fetches overlap.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import queue
import time
from pathlib import Path

import pytest

from tests.support.file_server import serve_files

pytest.importorskip("aiohttp")  # fsspec's http filesystem

PROCESSES = 4
MODEL_PATH = "/models/parakeet.nemo"


def fetch_in_process(uri: str, cache_dir: str, start: multiprocessing.synchronize.Barrier | None, locked: bool,
                     results: multiprocessing.Queue) -> None:
    """A node's actor starting: fetch the model; put (pid, path or the error, fetch began, fetch ended) on
    `results`. `locked=False` takes the per-object lock out (the control that shows the test sees a missing lock)."""
    from pipeline.io import fetch

    if not locked:
        fetch.file_lock = lambda path: contextlib.nullcontext()
    if start is not None:
        start.wait()  # every process has imported what it needs: the fetches begin together
    began = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
    try:
        fetched = str(fetch.fetch_file(uri, cache_dir=cache_dir))
    except Exception as error:  # told to the test, which says what went wrong
        fetched = f"{type(error).__name__}: {error}"
    results.put((os.getpid(), fetched, began, time.monotonic()))


def hash_in_process(model_path: str, cache_root: str, hashed_log: str, results: multiprocessing.Queue) -> None:
    """An actor asking its model's sha256 (`pipeline.model.actor.model_sha256`); each whole-file hash it makes is
    logged as one line of `hashed_log`."""
    from pipeline.config import ModelConfig
    from pipeline.io import fetch
    from pipeline.model.actor import model_sha256

    real_sha256 = fetch.file_sha256

    def logged_sha256(path: Path) -> str:
        with open(hashed_log, "a") as log:
            log.write(f"{os.getpid()} {path}\n")
        return real_sha256(path)

    fetch.file_sha256 = logged_sha256
    results.put(model_sha256(ModelConfig(uri=model_path, cache_dir=cache_root)))


def run_processes(target, argument_lists: list[tuple], timeout_s: float = 120.0) -> list:
    """Start one spawned process per argument tuple (each followed by a results queue), wait for all, return
    what each put on the queue."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=target, args=(*arguments, results)) for arguments in argument_lists]
    for process in processes:
        process.start()
    collected = []
    deadline = time.monotonic() + timeout_s
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(lambda: [process.kill() for process in processes if process.is_alive()])
        for _ in processes:
            try:
                collected.append(results.get(timeout=max(deadline - time.monotonic(), 0.1)))
            except queue.Empty:
                pytest.fail(f"{len(processes) - len(collected)} of {len(processes)} processes gave no result in "
                            f"{timeout_s} s (exit codes {[process.exitcode for process in processes]})")
        for process in processes:
            process.join(timeout=30)
            assert process.exitcode == 0, f"process {process.pid} exited with {process.exitcode}"
    return collected


def gets_of(served, path: str) -> int:
    return sum(1 for method, requested in served.requests if method == "GET" and requested == path)


def barrier_and_fetches(uri: str, cache_dir: Path, locked: bool) -> list:
    barrier = multiprocessing.get_context("spawn").Barrier(PROCESSES)
    return run_processes(fetch_in_process, [(uri, str(cache_dir), barrier, locked)] * PROCESSES)


def test_processes_of_one_node_fetch_a_remote_model_once_and_share_its_blob(tmp_path):
    payload = os.urandom(3 << 20)  # 3 MB at 1.5 MB/s: each download takes 2 s, so the fetches overlap
    digest = hashlib.sha256(payload).hexdigest()
    with serve_files({MODEL_PATH: payload}, bytes_per_s=1.5e6) as served:
        uri = f"{served.url}{MODEL_PATH}"
        cache_dir = tmp_path / "cache" / "models"
        fetched = barrier_and_fetches(uri, cache_dir, locked=True)

        assert gets_of(served, MODEL_PATH) == 1  # one download for the node
        assert len({pid for pid, *_ in fetched}) == PROCESSES
        assert max(began for _, _, began, _ in fetched) < min(ended for *_, ended in fetched), \
            "the fetches did not overlap: the test would not see a missing lock"
        blob = cache_dir / "blobs" / f"{digest}.nemo"
        assert {Path(path) for _, path, *_ in fetched} == {blob}  # every process the same blob
        assert blob.read_bytes() == payload
        assert sorted(p.name for p in blob.parent.iterdir()) == [blob.name]  # no partial files left

        # the control: with the lock taken out the same fetches each download it (and trip over each other's
        # partial files), so the count above sees a missing lock
        barrier_and_fetches(uri, tmp_path / "unlocked" / "models", locked=False)
        assert gets_of(served, MODEL_PATH) - 1 > 1


def test_a_process_killed_mid_download_leaves_no_blob_and_the_next_fetch_succeeds(tmp_path):
    payload = os.urandom(4 << 20)
    digest = hashlib.sha256(payload).hexdigest()
    cache_dir = tmp_path / "cache" / "models"
    blobs = cache_dir / "blobs"
    with serve_files({MODEL_PATH: payload}, bytes_per_s=0.5e6) as served:  # 8 s: killed well before the end
        uri = f"{served.url}{MODEL_PATH}"
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        victim = context.Process(target=fetch_in_process, args=(uri, str(cache_dir), None, True, results))
        victim.start()
        deadline = time.monotonic() + 60
        partial = []
        while not partial and time.monotonic() < deadline:  # until it has written part of the file
            partial = [p for p in blobs.glob(".download-*") if p.stat().st_size > 0] if blobs.is_dir() else []
            time.sleep(0.05)
        try:
            assert partial, "the download never started"
        finally:
            victim.kill()  # SIGKILL: no handler runs, only the kernel releases the lock (flock)
            victim.join(timeout=30)
        assert victim.exitcode == -9 and results.empty()
        assert partial[0].stat().st_size < len(payload)
        assert not (blobs / f"{digest}.nemo").exists()  # no blob: a partial file is never renamed into place

        served.bytes_per_s = None
        (fetched,) = run_processes(fetch_in_process, [(uri, str(cache_dir), None, True)], timeout_s=60)
        assert Path(fetched[1]) == blobs / f"{digest}.nemo" and Path(fetched[1]).read_bytes() == payload
        assert sorted(p.name for p in blobs.iterdir()) == [f"{digest}.nemo"]  # the dead one's partial removed
        assert gets_of(served, MODEL_PATH) == 2


def test_a_model_file_is_hashed_once_per_version_on_a_node_whichever_actors_ask(tmp_path):
    """Each ASR and writer actor asks its model's sha256 (a confidence calibration is checked against it, and the
    job's output is keyed by it): a 2.4 GB model is hashed once per version of the file on a node, not once per
    actor."""
    model = tmp_path / "model.nemo"
    model.write_bytes(os.urandom(1 << 20))
    hashed_log = tmp_path / "hashed.log"
    cache_root = tmp_path / "cache"
    digests = run_processes(hash_in_process, [(str(model), str(cache_root), str(hashed_log))] * 2)
    assert digests == [hashlib.sha256(model.read_bytes()).hexdigest()] * 2
    assert len(hashed_log.read_text().splitlines()) == 1

    model.write_bytes(os.urandom(1 << 20))  # a new version at the same path is hashed again, once
    digests = run_processes(hash_in_process, [(str(model), str(cache_root), str(hashed_log))])
    assert digests == [hashlib.sha256(model.read_bytes()).hexdigest()]
    assert len(hashed_log.read_text().splitlines()) == 2
