"""How right a job's progress is: its total from the first update, and its estimate of the time left against the
time that was really left, on the Ray job over N synthesized utterances (`pipeline/progress.py`).

The job runs as `jobs/transcribe.py` runs it (`run_transcription` on an in-process local Ray, the bundled model),
with `Progress` recording each update: when its part was committed, the share done and the time left it gave. Once
the job has ended, each update's estimate is set against the time that was really left (the last commit's time
minus the update's); the table gives that at the first update and at the first past 20%, 50% and 80% of the audio.

    python benchmarks/progress_eta.py --quick              # 300 utterances, about 25 s on 2 cores: a smoke run
    python benchmarks/progress_eta.py --utterances 3000    # the issue's 3,000

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeline.config import BUNDLED_MODEL, ModelConfig, ResourcesConfig, TranscribeJobConfig  # noqa: E402
from pipeline.progress import Progress  # noqa: E402


class RecordedProgress(Progress):
    """`Progress` that also keeps (time, share done, seconds left it said) of every update."""

    def __init__(self) -> None:
        super().__init__(stream=open(os.devnull, "w"), tty=False)
        self.updates: list[tuple[float, float | None, float | None, bool]] = []

    def __call__(self, done) -> None:
        super().__call__(done)  # timed by the part's commit: the driver may receive parts in bursts
        self.updates.append((done.get("last_commit_at") or self.clock(), self.fraction(done), self.eta_s(done),
                             self.counts is not None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="300 utterances")
    parser.add_argument("--utterances", type=int, default=3000)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray")
    args = parser.parse_args()
    utterances = 300 if args.quick else args.utterances
    import ray
    import soundfile

    from pipeline.graph import run_transcription
    from tests.support import random_nemo

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = random_nemo.synthesize(work / "audio", random_nemo.SENTENCES)
        durations = [soundfile.info(str(f)).duration for f in files]
        manifest = work / "manifest.json"
        with open(manifest, "w") as handle:
            for index in range(utterances):
                handle.write(json.dumps({"audio_filepath": str(files[index % len(files)]),
                                         "duration": durations[index % len(files)]}) + "\n")
        config = TranscribeJobConfig(manifests=(str(manifest),), output=str(work / "out"),
                                     model=ModelConfig(uri=str(BUNDLED_MODEL), cache_dir=tmp),
                                     resources=ResourcesConfig(device="cpu", torch_threads=1, audio_actors=1,
                                                               part_rows=64))
        ray.init(num_cpus=args.cpus, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level="ERROR",
                 log_to_driver=False)
        progress = RecordedProgress()
        try:
            from ray.data import DataContext

            DataContext.get_current().enable_progress_bars = False
            started = time.time()
            summary = run_transcription(config, progress=progress)
        finally:
            ray.shutdown()
    end = progress.updates[-1][0]
    rows = []
    marks = {"first update": None, "20% of the audio": 0.2, "50%": 0.5, "80%": 0.8}
    for name, share in marks.items():
        found = next((u for u in progress.updates if share is None or (u[1] is not None and u[1] >= share)), None)
        if found is None:
            continue
        at, fraction, eta, has_total = found
        real = end - at
        rows.append({"when": name, "at_s": at - started, "share_done": fraction, "has_total": has_total,
                     "eta_s": eta, "real_left_s": real,
                     "error": (eta - real) / real if eta is not None and real > 0 else None})
    print(f"# benchmarks/progress_eta.py: {utterances} utterances, {summary['this_run']['audio_hours'] * 3600:.0f} s "
          f"of audio, {len(progress.updates)} updates, {os.cpu_count()} CPUs\n")
    print("| update | at s | done | total known | time left said s | really left s | error |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        error = f"{100 * row['error']:+.0f}%" if row["error"] is not None else "-"
        eta = f"{row['eta_s']:.0f}" if row["eta_s"] is not None else "-"
        print(f"| {row['when']} | {row['at_s']:.0f} | {100 * (row['share_done'] or 0):.0f}% | {row['has_total']} | "
              f"{eta} | {row['real_left_s']:.0f} | {error} |")
    print(json.dumps({"benchmark": "progress_eta", "utterances": utterances, "updates": len(progress.updates),
                      "marks": rows, "wall_s": end - started}))


if __name__ == "__main__":
    main()
