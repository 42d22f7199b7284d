"""The nightly pseudo-labelling schedules in infra/schedule/: the CronJob parses and holds the fields it relies on,
and both it and the crontab line submit a command that `jobs/pseudo_label.py` accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

REPOSITORY = Path(__file__).resolve().parents[2]
SCHEDULE = REPOSITORY / "infra" / "schedule"
CRON_FIELD = re.compile(r"^(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*$")


def job_arguments(command: list[str]) -> list[str]:
    """What follows `python jobs/pseudo_label.py` in a `ray job submit ... -- python ...` command."""
    assert command[:3] == ["ray", "job", "submit"] or command[1:4] == ["job", "submit", "--address"], command
    at = command.index("jobs/pseudo_label.py")
    assert command[at - 1] == "python" and command[at - 2] == "--"
    return command[at + 1:]


def parses(arguments: list[str]) -> None:
    from jobs.pseudo_label import parser

    parser().parse_args(arguments)  # exits with the usage message on a flag it does not know


def test_the_cronjob_is_a_nightly_batch_v1_cronjob_that_cannot_overlap():
    manifest = yaml.safe_load((SCHEDULE / "pseudo_label_cronjob.yaml").read_text())
    assert (manifest["apiVersion"], manifest["kind"]) == ("batch/v1", "CronJob")
    spec = manifest["spec"]
    assert set(spec) <= {"schedule", "timeZone", "concurrencyPolicy", "startingDeadlineSeconds", "suspend",
                         "successfulJobsHistoryLimit", "failedJobsHistoryLimit", "jobTemplate"}
    fields = spec["schedule"].split()
    assert len(fields) == 5 and all(CRON_FIELD.match(f) for f in fields)
    assert spec["concurrencyPolicy"] == "Forbid"
    job = spec["jobTemplate"]["spec"]
    assert set(job) <= {"backoffLimit", "activeDeadlineSeconds", "template", "ttlSecondsAfterFinished"}
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    (container,) = pod["containers"]
    assert set(container) <= {"name", "image", "workingDir", "command", "args", "env", "resources"}
    parses(job_arguments(container["command"]))
    token = next(e for e in container["env"] if e["name"] == "RAY_AUTH_TOKEN")
    assert set(token["valueFrom"]["secretKeyRef"]) == {"name", "key"}


def test_the_crontab_line_is_five_fields_and_a_command_the_job_takes():
    lines = [line for line in (SCHEDULE / "pseudo_label.crontab").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    (line,) = lines
    parts = line.split(None, 5)
    assert all(CRON_FIELD.match(f) for f in parts[:5])
    command = shlex.split(parts[5].split(">>")[0])
    submit = command.index("submit")
    parses(job_arguments(["ray", "job", *command[submit:]]))
