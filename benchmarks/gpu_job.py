"""Step 5 of `benchmarks/gpu_run.py`: the transcription job end to end on the GPU, against the encoder's own speed
and the CPU's transcripts, with the GPU sampled while it runs, and the CPU cores per GPU that follow.

Without Ray (the device tool's image has none) the job's three row stages run in this process instead, the ASR
stage on the GPU. Context, sizes and skips: `benchmarks/gpu_steps.py`; what the step proves: docs/gpu.md.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.gpu_steps import RunContext, missing, need, production_shape, production_tokenizer, synchronize


# --- step 5 --------------------------------------------------------------------------------------------------------
class GpuSampler:
    """GPU utilisation (%) and memory in use (MiB) of device 0, sampled every `interval_s` in a thread (NVML, else
    nvidia-smi), while a `with` block runs."""

    def __init__(self, interval_s: float = 0.25) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self.source = "none"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _reader(self) -> Callable[[], tuple[float, float]]:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.source = "nvml"
            return lambda: (float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                            pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20)
        except Exception:  # noqa: BLE001  (no NVML: ask nvidia-smi)
            self.source = "nvidia-smi"

            def read() -> tuple[float, float]:
                line = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                                       "--format=csv,noheader,nounits", "-i", "0"], capture_output=True, text=True,
                                      timeout=5).stdout.strip()
                utilisation, memory = (float(value) for value in line.split(","))
                return utilisation, memory

            return read

    def _run(self) -> None:
        read = self._reader()
        while not self._stop.is_set():
            try:
                self.samples.append(read())
            except Exception:  # noqa: BLE001  (a failed sample is left out)
                pass
            self._stop.wait(self.interval_s)

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def figures(self) -> dict:
        if not self.samples:
            return {"source": self.source, "samples": 0}
        utilisation = [u for u, _ in self.samples]
        return {"source": self.source, "samples": len(self.samples),
                "utilisation_mean_percent": round(statistics.mean(utilisation), 1),
                "utilisation_busy_share": round(sum(u >= 50 for u in utilisation) / len(utilisation), 3),
                "memory_peak_mib": round(max(m for _, m in self.samples))}


def job_model(ctx: RunContext) -> tuple[Path, str]:
    """The job's `.nemo`: the production shape at `job_layers` (full depth by default) from `models_dir` where
    saved, else built and saved here (the recipe's `build_checkpoint`); a tiny encoder in the dry run."""
    from recipes.production_shapes.shapes import build_checkpoint

    shape = production_shape(ctx, ctx.job_layers)
    saved = ctx.models_dir / f"{shape.name}.nemo"
    if saved.exists():
        return saved, f"{saved}"
    started = time.perf_counter()
    built = build_checkpoint(shape, ctx.work / "shapes", tokenizer_dir=production_tokenizer(ctx))
    return Path(built["path"]), (f"{shape.name} ({shape.n_layers} layers, {built['parameters'] / 1e6:.0f} M "
                                 f"parameters) built here in {time.perf_counter() - started:.0f} s")


def stage_texts(ctx: RunContext, config, rows: list[dict], device: str) -> tuple[dict[str, str], dict]:
    """The job's three row stages in this process, no Ray, with the ASR stage on `device`: audio file -> text of
    `rows`, and the ASR stage's time and peak GPU memory."""
    import dataclasses

    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline import schema
    from pipeline.decoding import plan_decoding
    from pipeline.io import read_manifest
    from pipeline.model import read_model_facts
    from pipeline.stages import FinishAndWrite, LoadAudio, TranscribeBatch

    output = ctx.work / f"stages_{device}"
    config = dataclasses.replace(config, output=str(output),
                                 resources=dataclasses.replace(config.resources, device=device))
    facts = read_model_facts(config.model.uri)
    plan = plan_decoding(facts, config.decoding, device)
    manifest = ctx.work / f"stages_{device}.json"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    table = pa.Table.from_pylist(list(read_manifest(str(manifest))), schema=schema.INPUT_SCHEMA)
    audio = LoadAudio(facts.sample_rate)(table)
    transcribe = TranscribeBatch(config.model, plan, config.resources)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    transcribe(audio.slice(0, 1))  # the model loads in the background: wait for it outside the timing
    synchronize(device)
    started = time.perf_counter()
    decoded = transcribe(audio)
    synchronize(device)
    asr_s = time.perf_counter() - started
    FinishAndWrite(config.model, plan, str(output), "gpu_run")(decoded)
    written = pa.concat_tables([pq.read_table(part) for part in sorted(output.glob("part-*.parquet"))])
    texts = {Path(row[schema.AUDIO_FILEPATH]).name: row[schema.TEXT]
             for row in written.select([schema.AUDIO_FILEPATH, schema.TEXT]).to_pylist()}
    about = {"asr_s": round(asr_s, 3)}
    if device == "cuda":
        about["peak_memory_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
    return texts, about


def encoder_alone_s(ctx: RunContext, model_path: Path, waveforms: list[np.ndarray], batch_audio_s: float) -> float:
    """Preprocessor + encoder alone on the device over the audio in memory, length-bucketed as the ASR stage
    buckets (`plan_batches`): the floor the job's wall time is held against."""
    from pipeline.decoding import pad_waveforms
    from pipeline.model import load_asr_model
    from pipeline.stages import plan_batches

    model = load_asr_model(str(model_path), cache_dir=ctx.work / "cache", device=ctx.device)
    durations = np.array([len(w) / 16000 for w in waveforms])
    batches = plan_batches(durations, batch_audio_s, 64)
    model.encode(*pad_waveforms([waveforms[i] for i in batches[0][:2]]))  # warm-up
    synchronize(ctx.device)
    started = time.perf_counter()
    for batch in batches:
        model.encode(*pad_waveforms([waveforms[i] for i in batch]))
    synchronize(ctx.device)
    return time.perf_counter() - started


def job_step(ctx: RunContext) -> dict:
    """The transcription job end to end with `num_gpus` ASR actors on about an hour of speech (3-20 s segments of
    the bundled samples): RTFx, GPU utilisation sampled, peak GPU memory, transcripts against the CPU's for the
    same rows, and the job's steady RTFx against the encoder's own on the same audio."""
    need("nemo", "soundfile", "soxr", "pyarrow")
    from benchmarks.production_shapes import segments
    from pipeline.config import ModelConfig, ResourcesConfig, TranscribeJobConfig

    problems: list[str] = []
    notes: list[str] = []
    model_path, about = job_model(ctx)
    paths, waveforms = segments(ctx.work / "job_audio", ctx.job_audio_s)
    durations = [len(w) / 16000 for w in waveforms]
    audio_s = float(sum(durations))
    manifest = ctx.work / "job_manifest.json"
    rows = [{"audio_filepath": str(p), "duration": round(d, 4)} for p, d in zip(paths, durations)]
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    cpus = os.cpu_count() or 2
    # windows of rows and parts small enough that parts keep coming while the job runs (the steady RTFx is
    # measured between the first part and the last)
    resources = ResourcesConfig(device=ctx.device, asr_actors=max(1, torch.cuda.device_count()) if ctx.cuda else 1,
                                audio_actors=ctx.pick(max(2, cpus - 4), 1), writer_actors=ctx.pick(2, 1),
                                torch_threads=None if ctx.cuda else 1, window_rows=ctx.pick(128, 4),
                                part_rows=ctx.pick(32, 2))
    config = TranscribeJobConfig(manifests=(str(manifest),), model=ModelConfig(uri=str(model_path),
                                                                               cache_dir=str(ctx.work / "cache")),
                                 resources=resources, output=str(ctx.work / "job_output"))
    figures: dict[str, Any] = {"model": about, "audio_s": round(audio_s, 1), "rows": len(rows), "cpus": cpus,
                               "asr_actors": resources.asr_actors, "audio_actors": resources.audio_actors}
    compared = rows[:ctx.pick(16, 3)]
    cpu_texts, cpu_about = stage_texts(ctx, config, compared, "cpu")
    figures["stages_cpu"] = cpu_about
    if missing("ray"):
        notes.append("ray not installed: the job's stages ran in this process (stages_*), not as a Ray job")
        if ctx.cuda:
            gpu_texts, gpu_about = stage_texts(ctx, config, compared, "cuda")
            figures["stages_cuda"] = gpu_about
            figures["stages_same_texts_as_cpu"] = sum(gpu_texts.get(k) == v for k, v in cpu_texts.items())
            if figures["stages_same_texts_as_cpu"] != len(compared):
                problems.append(f"the stages' transcripts on the GPU equal the CPU's on "
                                f"{figures['stages_same_texts_as_cpu']}/{len(compared)} rows")
    else:
        job = ray_job(ctx, config)
        figures["job"] = job
        job_texts = job.pop("texts")
        figures["job_same_texts_as_cpu"] = sum(job_texts.get(k) == v for k, v in cpu_texts.items())
        if figures["job_same_texts_as_cpu"] != len(compared):
            problems.append(f"the job's transcripts equal the CPU's on {figures['job_same_texts_as_cpu']}/"
                            f"{len(compared)} rows")
        if job["rows_ok"] != len(rows):
            problems.append(f"the job wrote {job['rows_ok']} ok rows of {len(rows)}")
    figures["compared_rows"] = len(compared)
    encoder_s = encoder_alone_s(ctx, model_path, waveforms, ctx.pick(600.0, 60.0))
    figures["encoder_alone"] = {"wall_s": round(encoder_s, 3), "rtfx": round(audio_s / encoder_s, 1)}
    if "job" in figures and figures["job"].get("steady_rtfx"):
        figures["job_steady_over_encoder"] = round(figures["job"]["steady_rtfx"] / figures["encoder_alone"]["rtfx"],
                                                   3)
    figures["sizing"] = sizing(ctx, figures["encoder_alone"]["rtfx"])
    figures["notes"], figures["problems"] = notes, problems
    return figures


def sizing(ctx: RunContext, encoder_rtfx: float) -> dict:
    """CPU cores one GPU needs for its audio alone: the encoder's RTFx over what one core of this machine decodes
    (`benchmarks/audio_decode.py`, FLAC at 16 kHz as the bundled files are)."""
    from benchmarks.audio_decode import decode_rate, spoken_files

    rate = decode_rate(spoken_files()[:ctx.pick(170, 20)], rounds=1)["audio_s_per_cpu_s"]
    return {"audio_s_per_cpu_s": rate, "encoder_rtfx": encoder_rtfx,
            "audio_cores_per_gpu": round(encoder_rtfx / rate, 2)}


def ray_job(ctx: RunContext, config) -> dict:
    """`run_transcription` on the Ray cluster of RAY_ADDRESS where set, else a private local one (all the machine's
    CPUs and GPUs), timed part by part, with the GPU sampled."""
    import contextlib

    import ray

    from pipeline import schema
    from pipeline.graph import connect_ray, run_transcription
    from pipeline.io.sink import read_output

    started_ray = connect_ray(None)
    try:
        from ray.data import DataContext

        DataContext.get_current().enable_progress_bars = False
        marks: list[tuple[float, float]] = []  # (seconds since the start, audio seconds committed)
        started = time.perf_counter()

        def progress(totals: dict) -> None:
            marks.append((time.perf_counter() - started, float(totals.get("audio_hours", 0.0)) * 3600))

        sampler = GpuSampler() if ctx.cuda else contextlib.nullcontext()
        with sampler:
            summary = run_transcription(config, progress=progress)
        wall_s = time.perf_counter() - started
    finally:
        if started_ray:
            ray.shutdown()
    audio_s = float(summary["this_run"]["audio_hours"]) * 3600
    figures = {"wall_s": round(wall_s, 2), "rtfx": round(audio_s / wall_s, 1), "parts": len(marks),
               "first_part_s": round(marks[0][0], 2) if marks else None, "rows_ok": summary["rows_ok"],
               "rows_error": summary["rows_error"], "device": summary.get("device")}
    # after the first part (actors up, the model loaded), where enough came after it to tell: a short job's parts
    # come in one burst
    if len(marks) >= 2 and marks[-1][0] - marks[0][0] >= 2.0 and marks[-1][1] - marks[0][1] >= 0.25 * audio_s:
        figures["steady_rtfx"] = round((marks[-1][1] - marks[0][1]) / (marks[-1][0] - marks[0][0]), 1)
    else:
        figures["steady_rtfx"] = None  # "too short to tell"
    figures["gpu"] = sampler.figures() if ctx.cuda else "no CUDA device"
    table = read_output(config.output, columns=[schema.AUDIO_FILEPATH, schema.TEXT]).to_pylist()
    figures["texts"] = {Path(row[schema.AUDIO_FILEPATH]).name: row[schema.TEXT] for row in table}
    return figures


__all__ = ["GpuSampler", "job_step", "sizing"]
