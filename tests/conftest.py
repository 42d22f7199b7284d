"""Shared test setup: marker skips, a quiet single-threaded torch, small random NeMo models, and the session's one
local S3 server and one in-process Ray."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest
import soundfile
import torch

# Tests run many tiny ops; one thread avoids oversubscribing a 2-core machine.
torch.set_num_threads(1)


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _missing(marker: str) -> str | None:
    if marker == "gpu":
        return None if torch.cuda.is_available() else "no CUDA GPU visible"
    if marker == "ray":
        return None if _has_module("ray") else "ray is not installed"
    if marker == "nemo":
        return None if _has_module("nemo") else "nemo_toolkit is not installed"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in ("gpu", "ray", "nemo"):
            if item.get_closest_marker(marker) is not None:
                reason = _missing(marker)
                if reason is not None:
                    item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def nemo_assets(tmp_path_factory):
    """Tokenizer, audio files and one calibrated `.nemo` per kind, built once per session."""
    pytest.importorskip("nemo.collections.asr")
    from tests.support import random_nemo

    root = tmp_path_factory.mktemp("nemo")
    tokenizer_dir = random_nemo.train_tokenizer(root / "tokenizer", vocab_size=64)
    files = random_nemo.synthesize(root / "audio", random_nemo.SENTENCES[:8])
    waveforms = [soundfile.read(path, dtype="float32")[0] for path in files]
    checkpoints = {}
    for kind in random_nemo.KINDS:
        model = random_nemo.build_random_model(kind, tokenizer_dir)
        random_nemo.calibrate_emission(model, waveforms[:4])
        checkpoints[kind] = root / f"{kind}.nemo"
        model.save_to(str(checkpoints[kind]))
    return {"files": files, "waveforms": waveforms, "checkpoints": checkpoints}


@pytest.fixture(scope="session")
def s3():
    """A moto S3 server on 127.0.0.1 for the whole session, with the AWS variables set; yields its endpoint URL.

    It starts no bucket: a test creates its own (`tests.support.s3_server.create_bucket`). Tests that need no Ray
    may start a server of their own instead (`moto_s3`), which sets and restores the variables around itself."""
    pytest.importorskip("moto")
    from tests.support.s3_server import moto_s3

    with moto_s3() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def ray_cluster(request):
    """In-process Ray on 127.0.0.1, one for the whole session; yields its GCS address (for a driver started as a
    subprocess).

    Started after the session's S3 server (`s3`, where moto is installed): a Ray worker keeps the environment it
    started with, so this is the one S3 server the workers can reach. Three logical CPUs on a 2-core machine: the
    tests' jobs reserve at most 1.25 for their actors, which leaves the one whole CPU that splitting the manifest
    rows into small blocks needs (`graph.read_rows`), as on any real cluster.
    """
    ray = pytest.importorskip("ray")
    if _has_module("moto"):
        request.getfixturevalue("s3")
    temp_dir = Path("/tmp") / f"lsray{os.getpid()}"  # short: Ray's socket paths below it must fit in 107 bytes
    ray.init(num_cpus=3, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=str(temp_dir),
             logging_level="WARNING", log_to_driver=False)
    from ray.data import DataContext

    DataContext.get_current().execution_no_progress_timeout_s = 300  # a hang fails the test instead of waiting
    DataContext.get_current().enable_progress_bars = False
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)
