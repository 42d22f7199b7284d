"""`benchmarks/gpu_run.py`: its dry run on the CPU runs every step at toy sizes through the code a GPU runs, and
ends with one JSON line naming the six steps, each with a status, none failed (what CI checks, so that the script
works the first time a GPU runs it); and its runner keeps a failing or too-long step from stopping the others."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.gpu_run import STEPS, Step, main, run_step
from benchmarks.gpu_steps import RunContext, StepSkipped

REPOSITORY = Path(__file__).resolve().parents[2]
NAMES = ["gpu_tests", "greedy", "beam_lm", "ctc", "job", "autocast"]


def context(tmp_path: Path, budget_s: float = 60.0) -> RunContext:
    return RunContext(device="cpu", dry_run=True, work=tmp_path, models_dir=tmp_path / "none", budget_s=budget_s)


def test_the_six_steps_in_order_of_value():
    assert [(step.number, step.name) for step in STEPS] == list(enumerate(NAMES, start=1))


def test_a_step_past_the_budget_is_skipped_a_failing_one_fails_alone(tmp_path):
    ran = []

    def fine(ctx):
        ran.append("fine")
        return {"figure": 1}

    def broken(ctx):
        raise ZeroDivisionError("a bug")

    def unhappy(ctx):
        return {"figure": 2, "problems": ["tokens differ"]}

    def absent(ctx):
        raise StepSkipped("nemo not installed")

    ctx = context(tmp_path, budget_s=30.0)
    results = [run_step(Step(n, name, "", run, (0, usual_s)), ctx) for n, name, run, usual_s in (
        (1, "broken", broken, 1), (2, "long", fine, 3600), (3, "fine", fine, 1), (4, "unhappy", unhappy, 1),
        (5, "absent", absent, 1))]
    assert [r["status"] for r in results] == ["failed", "skipped", "ok", "failed", "skipped"]
    assert results[0]["error"] == "ZeroDivisionError: a bug"
    assert "ZeroDivisionError: a bug" in results[0]["traceback"][-1]
    assert results[1]["reason"].startswith("the budget: it usually takes about 3600 s") and ran == ["fine"]
    assert results[2]["figures"] == {"figure": 1}
    assert results[3]["error"] == "tokens differ" and results[3]["figures"] == {"figure": 2}
    assert results[4]["reason"] == "nemo not installed"


def test_one_step_of_the_dry_run_writes_both_files_and_the_json_line(tmp_path, capsys):
    assert main(["--dry-run", "--out", str(tmp_path / "out"), "--steps", "4"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(s["name"], s["status"]) for s in last["steps"]] == [("ctc", "ok")]
    figures = last["steps"][0]["figures"]
    assert figures["beam_same_tokens_as_cpu_compiled"] == figures["utterances"]
    assert figures["collapse_same_lengths_as_cpu"]
    written = json.loads((tmp_path / "out" / "gpu_run.json").read_text())
    assert written["steps"] == last["steps"] and written["dry_run"] is True
    assert "| 4 | ctc | ok |" in (tmp_path / "out" / "gpu_run.md").read_text()


def test_without_a_gpu_the_real_run_refuses_and_points_at_the_dry_run(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    assert main(["--out", str(tmp_path / "out")]) == 2
    assert "--dry-run" in capsys.readouterr().err


@pytest.mark.slow
def test_the_dry_run_names_the_six_steps_each_with_a_status_and_none_fails(request, tmp_path):
    """The whole dry run, as CI runs it (a few minutes on a 2-core machine), on the session's Ray where Ray is
    installed."""
    # the session's Ray first: starting it sets RAY_AUTH_MODE=token here, which a driver joining it needs too
    address = request.getfixturevalue("ray_cluster") if importlib.util.find_spec("ray") is not None else None
    env = {**os.environ, "PYTHONUNBUFFERED": "1"} | ({"RAY_ADDRESS": address} if address else {})
    out = tmp_path / "out"
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "benchmarks/gpu_run.py", "--dry-run", "--out", str(out)],
                            cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=1500)
    last = json.loads(result.stdout.strip().splitlines()[-1])
    steps = last["steps"]
    assert [step["name"] for step in steps] == NAMES, result.stdout[-3000:]
    failed = {step["name"]: [step.get("error"), *step.get("traceback", [])] for step in steps
              if step["status"] == "failed"}
    assert not failed, json.dumps(failed, indent=1)
    for step in steps:
        assert step["status"] in ("ok", "skipped")
        assert step.get("reason") if step["status"] == "skipped" else step.get("figures"), step
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "gpu_run.json").read_text())["steps"] == steps
    markdown = (out / "gpu_run.md").read_text()
    assert all(f"| {step['step']} | {step['name']} | {step['status']} |" in markdown for step in steps)
    print(f"dry run: {time.perf_counter() - started:.0f} s, " + ", ".join(f"{s['name']} {s['seconds']} s"
                                                                        for s in steps))
