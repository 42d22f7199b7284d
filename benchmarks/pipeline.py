"""Throughput of the Ray pipeline against a bare in-process loop, and the padding efficiency of bucketing.

1. Padding efficiency: utterance durations drawn from a lognormal (median 6 s, clipped to 1-30 s, as in
   read-speech and podcast segment corpora), packed into encoder batches of at most `--batch-audio-s` padded
   seconds and `--max-batch-size` rows: in manifest order without bucketing, and with loopscribe's bucketing
   (`plan_batches`) inside streaming windows of 64 to 4096 rows. Efficiency = real seconds / padded seconds.
2. Throughput: the same manifest (N rows over synthesized speech files), the same model and the same stage
   code, run (a) as a bare loop in this process (LoadAudio -> TranscribeBatch -> FinishAndWrite on windows
   of rows, no Ray) and (b) as the Ray Data job (`run_transcription`) on an in-process local Ray with the
   given CPUs. Both write Parquet. RTFx = audio seconds / wall seconds; the Ray time includes starting its
   actors (each loads the model), reported separately as the time to the first committed part. The Ray job
   runs twice: as configured (the audio and writer actors `resources.side_stage_nice` steps below the ASR
   actor), then with every stage at one priority (`--side-stage-nice 0`), to show what the priority buys;
   `--rounds N` repeats the two Ray runs in alternating order and reports their medians (the bare loop runs
   once, first: it includes the NeMo import, which this process has done after it).

    python benchmarks/pipeline.py --quick                 # under a minute or two on a 2-core CPU
    python benchmarks/pipeline.py --model model.nemo      # default: the bundled model, else a random one

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeline import schema  # noqa: E402
from pipeline.config import BUNDLED_MODEL, ModelConfig, ResourcesConfig, TranscribeJobConfig  # noqa: E402
from pipeline.stages import (  # noqa: E402
    FinishAndWrite,  # noqa: E402
    LoadAudio,  # noqa: E402
    TranscribeBatch,  # noqa: E402
    padded_seconds,
    padding_efficiency,
    plan_batches,
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer durations and utterances")
    parser.add_argument("--model", help="a .nemo (default: the bundled model, else a random calibrated RNN-T)")
    parser.add_argument("--utterances", type=int, default=400, help="rows of the throughput manifest")
    parser.add_argument("--durations", type=int, default=20_000, help="durations drawn for the padding table")
    parser.add_argument("--batch-audio-s", type=float, default=300.0)
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the ASR stage")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of (bare loop, both Ray runs in alternating order); medians are reported")
    args = parser.parse_args()
    if args.quick:
        args.utterances, args.durations = 96, 5_000
    return args


def lognormal_durations(count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(mean=np.log(6.0), sigma=0.8, size=count), 1.0, 30.0)


def unbucketed_batches(durations_s: np.ndarray, max_batch_duration_s: float, max_batch_size: int) -> list:
    """Consecutive rows in manifest order, each batch as long as its padded seconds fit the budget."""
    batches, current, longest = [], [], 0.0
    for index, duration in enumerate(durations_s):
        grown = max(longest, duration)
        if current and (grown * (len(current) + 1) > max_batch_duration_s or len(current) == max_batch_size):
            batches.append(np.array(current))
            current, grown = [], duration
        current.append(index)
        longest = grown
    if current:
        batches.append(np.array(current))
    return batches


def padding_table(args) -> dict:
    durations = lognormal_durations(args.durations)
    rows = {"no bucketing (manifest order)": unbucketed_batches(durations, args.batch_audio_s, args.max_batch_size)}
    for window in (64, 256, 1024, 4096):
        batches = []
        for start in range(0, len(durations), window):
            batches += [b + start for b in plan_batches(durations[start:start + window], args.batch_audio_s,
                                                        args.max_batch_size)]
        rows[f"bucketed, window {window}"] = batches
    print(f"\n## Padding efficiency: {len(durations)} lognormal durations (median {np.median(durations):.1f} s, "
          f"mean {durations.mean():.1f} s, 1-30 s), batches <= {args.batch_audio_s:g} padded s and "
          f"<= {args.max_batch_size} rows\n")
    print("| packing | batches | padded hours | efficiency |")
    print("| --- | --- | --- | --- |")
    figures = {}
    for name, batches in rows.items():
        assert sorted(np.concatenate(batches).tolist()) == list(range(len(durations)))  # every row exactly once
        efficiency = padding_efficiency(durations, batches)
        figures[name] = {"batches": len(batches), "efficiency": round(efficiency, 4)}
        print(f"| {name} | {len(batches)} | {padded_seconds(durations, batches) / 3600:.1f} | {efficiency:.3f} |")
    return figures


def make_model_and_audio(args, work: Path) -> tuple[str, list[Path]]:
    from tests.support import random_nemo

    files = random_nemo.synthesize(work / "audio", random_nemo.SENTENCES)
    if args.model:
        return args.model, files
    if BUNDLED_MODEL.exists():
        return str(BUNDLED_MODEL), files
    import soundfile

    tokenizer = random_nemo.train_tokenizer(work / "tokenizer", vocab_size=64)
    model = random_nemo.build_random_model("rnnt", tokenizer)
    random_nemo.calibrate_emission(model, [soundfile.read(f, dtype="float32")[0] for f in files[:4]])
    path = work / "random_rnnt.nemo"
    model.save_to(str(path))
    return str(path), files


def bare_loop(config: TranscribeJobConfig, manifest: str) -> tuple[float, float]:
    """The stages in this process over windows of rows, as a hand-written loop would run them."""
    import pyarrow as pa

    from pipeline.decoding import plan_decoding
    from pipeline.io import read_manifest
    from pipeline.model import read_model_facts

    started = time.perf_counter()
    facts = read_model_facts(config.model.uri)
    plan = plan_decoding(facts, config.decoding, "cpu")
    load_audio = LoadAudio(facts.sample_rate)
    transcribe = TranscribeBatch(config.model, plan, config.resources)
    finish = FinishAndWrite(config.model, plan, config.output, "bench")
    rows = list(read_manifest(manifest))
    audio_s = 0.0
    window = config.resources.window_rows
    for start in range(0, len(rows), window):
        table = pa.Table.from_pylist(rows[start:start + window], schema=schema.INPUT_SCHEMA)
        summary = finish(transcribe(load_audio(table)))
        audio_s += summary.column(schema.AUDIO_S)[0].as_py()
    return time.perf_counter() - started, audio_s


def ray_job(config: TranscribeJobConfig, cpus: int) -> tuple[float, float, float]:
    """-> (wall seconds, audio seconds, seconds until the first part was committed)"""
    import ray

    from pipeline.graph import run_transcription

    ray.init(num_cpus=cpus, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level="ERROR",
             log_to_driver=False)
    try:
        from ray.data import DataContext

        DataContext.get_current().enable_progress_bars = False
        started = time.perf_counter()
        summary = run_transcription(config, progress=lambda done: None)
        wall = time.perf_counter() - started
    finally:
        ray.shutdown()
    run = summary["this_run"]
    return wall, run["audio_hours"] * 3600, run["first_part_s"]


def main() -> None:
    args = parse_args()
    import logging

    logging.getLogger("nemo_logger").setLevel(logging.ERROR)  # NeMo prints every config it restores
    import torch

    torch.set_num_threads(args.threads)
    print(f"# benchmarks/pipeline.py {'--quick' if args.quick else ''}: {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, torch threads {args.threads}, Ray CPUs {args.cpus}")
    padding = padding_table(args)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_uri, files = make_model_and_audio(args, work)
        manifest = work / "manifest.json"
        with open(manifest, "w") as handle:
            for index in range(args.utterances):
                handle.write(json.dumps({"audio_filepath": str(files[index % len(files)]), "duration": 30.0}) + "\n")
        resources = ResourcesConfig(device="cpu", batch_audio_s=args.batch_audio_s,
                                    max_batch_size=args.max_batch_size, torch_threads=args.threads, audio_actors=1,
                                    window_rows=32, part_rows=32)
        config = TranscribeJobConfig(manifests=(str(manifest),), model=ModelConfig(uri=model_uri, cache_dir=tmp),
                                     resources=resources, output=str(work / "bare"))
        alike = dataclasses.replace(resources, side_stage_nice=0)
        runs: dict[str, list[tuple[float, float]]] = {"bare": [], "ray": [], "alike": []}  # (wall s, first part s)
        # once, first: later in this process NeMo would already be imported, which the bare loop's time includes
        bare_s, bare_audio_s = bare_loop(config, str(manifest))
        runs["bare"].append((bare_s, 0.0))
        for round_ in range(args.rounds):  # the two Ray runs alternate which goes first
            out = work / f"round{round_}"
            for name in (("ray", "alike") if round_ % 2 == 0 else ("alike", "ray")):
                job = TranscribeJobConfig(manifests=(str(manifest),), model=config.model, output=str(out / name),
                                          resources=resources if name == "ray" else alike)
                wall, ray_audio_s, first = ray_job(job, args.cpus)
                runs[name].append((wall, first))
        median = {name: tuple(float(np.median([r[i] for r in values])) for i in (0, 1))
                  for name, values in runs.items()}
        bare_s, (ray_s, first_part_s), (alike_s, alike_first_part_s) = median["bare"][0], median["ray"], median["alike"]
    name = Path(model_uri).name
    print(f"\n## Throughput: {args.utterances} utterances ({bare_audio_s / 60:.1f} min of audio), model {name}, "
          "greedy, device cpu\n")
    print("| run | wall s | RTFx | speed vs bare loop | first part committed after (s) |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| bare in-process loop (same stages, no Ray) | {bare_s:.1f} | {bare_audio_s / bare_s:.1f} | 1.00 | |")
    print(f"| Ray pipeline ({args.cpus} CPUs) | {ray_s:.1f} | {ray_audio_s / ray_s:.1f} | {bare_s / ray_s:.3f} | "
          f"{first_part_s:.2f} |")
    print(f"| Ray pipeline, every stage at one priority | {alike_s:.1f} | {ray_audio_s / alike_s:.1f} | "
          f"{bare_s / alike_s:.3f} | {alike_first_part_s:.2f} |")
    print("\n(The Ray time includes starting Ray and its actors, each of which imports NeMo and loads the model; "
          "on a job this short that start dominates.)")
    print(json.dumps({
        "benchmark": "pipeline", "quick": args.quick, "model": name, "utterances": args.utterances,
        "audio_s": round(bare_audio_s, 2), "bare_wall_s": round(bare_s, 2), "ray_wall_s": round(ray_s, 2),
        "ray_first_part_s": round(first_part_s, 2), "ray_speed_vs_bare": round(bare_s / ray_s, 3),
        "side_stage_nice": resources.side_stage_nice, "one_priority_wall_s": round(alike_s, 2),
        "one_priority_first_part_s": round(alike_first_part_s, 2),
        "one_priority_speed_vs_bare": round(bare_s / alike_s, 3), "rounds": args.rounds,
        "runs": {name: [[round(wall, 2), round(first, 2)] for wall, first in values] for name, values in runs.items()},
        "bare_rtfx": round(bare_audio_s / bare_s, 2), "ray_rtfx": round(ray_audio_s / ray_s, 2),
        "padding": padding, "cpus": args.cpus, "threads": args.threads,
    }))


if __name__ == "__main__":
    main()
