"""GPUs asked of a cluster that has none: refused in one line naming `--device`, before any actor starts
(`pipeline/preflight.py::asr_device`, called by `pipeline/graph.py::resolve_device` once the job has joined its
cluster). Until this check, such a job requested one GPU per ASR actor and Ray Data waited for them forever."""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path

import pytest

from pipeline.preflight import PreflightError, asr_device

REPOSITORY = Path(__file__).resolve().parents[2]
BUNDLED_MODEL = REPOSITORY / "models" / "demo_hybrid_rnnt_ctc.nemo"
SAMPLE = REPOSITORY / "samples" / "sample00.flac"


@pytest.mark.parametrize("asked, cluster_gpus, autoscaler_gpus, expected", [
    ("auto", 0, 0, "cpu"),
    ("auto", 2, 0, "cuda"),
    ("auto", 0, 4, "cuda"),  # an autoscaling cluster whose GPU nodes are not up yet (infra/: GPU groups from 0)
    ("cuda", 1, 0, "cuda"),
    ("cuda", 0, 4, "cuda"),
    ("cpu", 8, 8, "cpu"),
])
def test_the_asr_device(asked, cluster_gpus, autoscaler_gpus, expected):
    assert asr_device(asked, cluster_gpus, autoscaler_gpus) == expected


def test_cuda_on_a_cluster_that_can_get_no_gpu_is_refused_naming_the_setting():
    with pytest.raises(PreflightError, match=r"^--device cuda: the Ray cluster has no GPU .*--device cpu"):
        asr_device("cuda", 0, 0)


@pytest.mark.ray
def test_the_job_refuses_cuda_on_the_gpu_less_test_cluster_before_any_actor(ray_cluster, tmp_path):
    """The real command in this process, on the session's Ray (which has no GPU and no autoscaler): one line, and
    nothing done for the job: no claim on the output, no part, and well within the time an actor takes to load."""
    import ray

    from jobs.transcribe import main
    from pipeline.graph import autoscaler_gpus

    assert ray.cluster_resources().get("GPU", 0) == 0 and autoscaler_gpus() == 0.0
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"audio_filepath": str(SAMPLE), "duration": 1.0}) + "\n")
    output = tmp_path / "out"
    started = time.perf_counter()
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as exit:
        main(["--manifest", str(manifest), "--output", str(output), "--model", str(BUNDLED_MODEL),
              "--cache-dir", str(tmp_path / "cache"), "--device", "cuda"])
    assert str(exit.value).startswith("loopscribe: --device cuda: the Ray cluster has no GPU"), exit.value
    assert time.perf_counter() - started < 30
    assert not (output / "_identity.json").exists() and not list(output.glob("part-*"))
