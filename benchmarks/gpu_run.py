"""The GPU run: one command that runs every GPU path of loopscribe within a time budget and leaves the figures
behind, rehearsed on the CPU (`--dry-run`, which CI runs) so that it works the first time a GPU runs it.

    python benchmarks/gpu_run.py --out DIR                  # on a CUDA machine: the six steps in about 7 minutes
    python benchmarks/gpu_run.py --dry-run --out DIR        # the same code on the CPU at toy sizes: a few minutes

The steps, in order of value (what each proves, and the figures of the runs so far: docs/gpu.md):
1. `pytest -m gpu`: every GPU test, with a fallback (Triton -> torch, CUDA graphs -> eager) made an error;
2. greedy label-looping with and without CUDA graphs against NeMo's `greedy_batch` (same tokens) at batch 1, 32 and
   128, on the production shape parakeet-tdt-0.6b (random weights, calibrated) and the bundled demo model; WIND
   W=8 at batch 1;
3. ALSD++ against NeMo's `malsd_batch`; ALSD++ and WIND beam with a GPU n-gram LM, CUDA graphs against eager; the
   Triton `advance` against the torch one and KenLM;
4. CTC: blank collapse and the CTC beam on the GPU, against the compiled CPU search the writers run;
5. the transcription job end to end with `num_gpus` ASR actors on about an hour of speech: RTFx, GPU utilisation,
   peak GPU memory, transcripts against the CPU's, the job's steady RTFx against the encoder's own;
6. fp16 and bf16 autocast of the encoder: WER against fp32 on the bundled sets, and the speed.

Each step is timed, and skipped with a note when its usual time would pass `--budget-s`; a step that fails
(an exception, or a check that does not hold: its `problems`) never stops the others. A part that needs a missing
package (NeMo, Ray, KenLM, jiwer) is left out with a note; without NeMo the decoder steps decode stand-ins of the
same widths. After every step `DIR/gpu_run.json` and `DIR/gpu_run.md` are written again, so a run cut short
leaves what it measured. The table is printed at the end, and the last line is one JSON object whose `steps` name
each step with its `status` (ok, skipped with its `reason`, failed with its `error`) and figures. The exit status
is 0 when no step failed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._timing import machine  # noqa: E402
from benchmarks.gpu_job import job_step  # noqa: E402
from benchmarks.gpu_steps import (  # noqa: E402
    RunContext,
    StepSkipped,
    autocast_step,
    beam_step,
    ctc_step,
    gpu_tests_step,
    greedy_step,
    missing,
)


@dataclass(frozen=True)
class Step:
    number: int
    name: str
    proves: str
    run: Callable[[RunContext], dict]
    usual_s: tuple[float, float]  # what it usually takes: on a GPU, in the dry run (the budget check)


STEPS = (
    Step(1, "gpu_tests", "every GPU test passes on the GPU itself, no fallback taken", gpu_tests_step, (90, 45)),
    Step(2, "greedy", "label-looping with CUDA graphs gives NeMo's greedy_batch tokens, and how much faster, at "
                      "batch 1, 32, 128; WIND W=8 at batch 1", greedy_step, (60, 45)),
    Step(3, "beam_lm", "ALSD++ = NeMo's malsd_batch; ALSD++ and WIND beam with a GPU n-gram LM, graphs = eager; "
                       "Triton advance = torch = KenLM", beam_step, (60, 20)),
    Step(4, "ctc", "blank collapse and the CTC beam on the GPU give the writers' CPU results", ctc_step, (25, 10)),
    Step(5, "job", "the job with num_gpus ASR actors: RTFx, GPU busy share and memory, the CPU's transcripts, the "
                   "job's steady RTFx against the encoder's own", job_step, (150, 90)),
    Step(6, "autocast", "fp16 / bf16 encoder: WER against fp32 on the bundled sets, and the speed", autocast_step,
         (35, 20)),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="folder for gpu_run.json and gpu_run.md")
    parser.add_argument("--dry-run", action="store_true", help="the CPU rehearsal: every step at toy sizes")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="seconds for all steps; a step whose usual time would pass it is skipped")
    parser.add_argument("--steps", type=int, nargs="+", choices=[s.number for s in STEPS],
                        default=[s.number for s in STEPS], help="run only these steps (e.g. again, after a failure)")
    parser.add_argument("--models", type=Path, default=Path("/tmp/shapes"),
                        help="saved production shapes (recipes/production_shapes/build.py --out): used where present")
    parser.add_argument("--decoder-layers", type=int, default=2,
                        help="encoder layers of the production shape the decoder steps encode with")
    parser.add_argument("--job-layers", type=int, default=None, help="the job's production shape (default: full)")
    parser.add_argument("--job-audio-s", type=float, default=None,
                        help="audio the job transcribes (default: 3600, in the dry run 40)")
    return parser.parse_args(argv)


def run_step(step: Step, ctx: RunContext) -> dict[str, Any]:
    """One step: skipped where its usual time would pass the budget, else timed; an exception or a check that
    does not hold fails it, and nothing it raises reaches the other steps."""
    result: dict[str, Any] = {"step": step.number, "name": step.name, "proves": step.proves}
    usual_s, left_s = ctx.pick(*step.usual_s), ctx.left_s()
    if usual_s > left_s:
        return result | {"status": "skipped", "seconds": 0.0,
                         "reason": f"the budget: it usually takes about {usual_s:.0f} s, {max(left_s, 0):.0f} s are "
                                   "left (--budget-s)"}
    started = time.perf_counter()
    try:
        figures = step.run(ctx)
        problems = figures.pop("problems", []) or []
        result |= {"status": "failed", "error": "; ".join(problems)[:2000]} if problems else {"status": "ok"}
        result["figures"] = figures
    except StepSkipped as skipped:
        result |= {"status": "skipped", "reason": str(skipped)}
    except Exception as error:  # noqa: BLE001  (a failing step is a result; the next step still runs)
        result |= {"status": "failed", "error": f"{type(error).__name__}: {error}"[:2000],
                   "traceback": "".join(traceback.format_exception(error)).splitlines()[-60:]}
    finally:
        gc.collect()
        if ctx.cuda:
            torch.cuda.empty_cache()
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def about_machine(device: str) -> dict[str, Any]:
    about = machine(device)
    about["system"] = platform.platform()
    if device == "cuda":
        about["cuda"] = torch.version.cuda
        about["gpus"] = torch.cuda.device_count()
        about["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        try:
            import pynvml

            pynvml.nvmlInit()
            about["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception:  # noqa: BLE001  (no NVML: no driver version)
            pass
    for package in ("triton", "nemo", "ray", "kenlm", "jiwer"):
        if missing(package):
            about[package] = None
            continue
        try:
            from importlib.metadata import version

            about[package] = version({"nemo": "nemo_toolkit"}.get(package, package))
        except Exception:  # noqa: BLE001  (installed without metadata)
            about[package] = "installed"
    return about


def headline(result: dict[str, Any]) -> str:
    """The few figures of a step that fit in a table cell."""
    if result["status"] == "skipped":
        return result["reason"]
    figures = result.get("figures") or {}
    if result["status"] == "failed" and not figures:
        return result["error"][:300]
    name, parts = result["name"], []
    if name == "gpu_tests":
        parts.append(f"{figures.get('passed')} passed, {figures.get('failed')} failed, {figures.get('skipped')} "
                     "skipped")
    elif name in ("greedy", "beam_lm"):
        if "advance" in figures:
            advance = figures["advance"]
            parts.append(f"advance V={advance['vocab_size']} B={advance['batch_size']}: torch {advance['torch_ms']} ms"
                         + (f", Triton {advance['triton_ms']} ms" if "triton_ms" in advance else ""))
        for subject, entry in figures.get("subjects", {}).items():
            for row in entry["rows"]:
                ms = row["ms_per_utterance"]
                cells = ", ".join(f"{n} {v:g}" for n, v in ms.items())
                parts.append(f"{subject} B={row['batch_size']} ms/utt: {cells}")
    elif name == "ctc":
        ms = figures.get("ms_per_utterance", {})
        parts.append(f"beam+collapse {ms.get('beam_collapse_0.9')} ms/utt ({figures.get('collapse_speedup')}x over "
                     f"no collapse); same as CPU {figures.get('beam_same_tokens_as_cpu_compiled')}/"
                     f"{figures.get('utterances')}")
    elif name == "job":
        job = figures.get("job", {})
        parts.append(f"{figures.get('audio_s')} s of audio; job RTFx {job.get('rtfx')} (steady "
                     f"{job.get('steady_rtfx')}), encoder alone {figures.get('encoder_alone', {}).get('rtfx')}, "
                     "steady / encoder "
                     f"{figures.get('job_steady_over_encoder')}; same texts as CPU "
                     f"{figures.get('job_same_texts_as_cpu', figures.get('stages_same_texts_as_cpu'))}/"
                     f"{figures.get('compared_rows')}; GPU {job.get('gpu')}")
    elif name == "autocast":
        for precision, entry in figures.get("precisions", {}).items():
            parts.append(f"{precision}: encoder RTFx {entry['encoder_rtfx']}, WER {entry.get('wer')}, same text as "
                         f"fp32 {entry['same_text_as_fp32']}/{figures['utterances']}")
    notes = figures.get("notes") or []
    text = "; ".join(parts + [f"note: {note}" for note in notes])
    if result["status"] == "failed":
        text = f"{result['error'][:300]} | {text}"
    return text.replace("|", "/").replace("\n", " ")


def report(results: list[dict[str, Any]], header: dict[str, Any], out: Path) -> str:
    """Writes gpu_run.json and gpu_run.md under `out`; returns the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    summary = header | {"steps": results}
    (out / "gpu_run.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    about = header["machine"]
    lines = [f"# GPU run ({'dry run on the CPU' if header['dry_run'] else about.get('gpu', 'GPU')})", "",
             f"`{header['command']}`, {header['started']}; budget {header['budget_s']:.0f} s, "
             f"{header.get('wall_s', 0):.0f} s so far.", "",
             "machine: " + ", ".join(f"{k} {v}" for k, v in about.items()), "",
             "| # | step | status | s | figures |", "| --- | --- | --- | ---: | --- |"]
    for result in results:
        lines.append(f"| {result['step']} | {result['name']} | {result['status']} | {result['seconds']:.0f} | "
                     f"{headline(result)} |")
    lines += ["", "What each step proves:", ""]
    lines += [f"{step.number}. `{step.name}`: {step.proves}" for step in STEPS]
    lines += ["", "Every figure is in gpu_run.json beside this file."]
    markdown = "\n".join(lines) + "\n"
    (out / "gpu_run.md").write_text(markdown)
    return markdown


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_run: no CUDA device visible; `--dry-run` rehearses the steps on the CPU", file=sys.stderr)
        return 2
    device = "cpu" if args.dry_run else "cuda"
    command = ("python benchmarks/gpu_run.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    header = {"benchmark": "gpu_run", "command": command, "dry_run": args.dry_run, "budget_s": args.budget_s,
              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": about_machine(device)}
    import logging

    logging.getLogger("nemo_logger").setLevel(logging.ERROR)  # NeMo prints every config it builds or restores
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_run_") as work:
        ctx = RunContext(device=device, dry_run=args.dry_run, work=Path(work), models_dir=args.models,
                         budget_s=args.budget_s, decoder_layers=args.decoder_layers, job_layers=args.job_layers,
                         job_audio_s=args.job_audio_s or (40.0 if args.dry_run else 3600.0))
        for step in STEPS:
            if step.number not in args.steps:
                continue
            print(f"gpu_run: step {step.number} ({step.name}) ...", flush=True)
            results.append(run_step(step, ctx))
            result = results[-1]
            print(f"gpu_run: step {step.number} ({step.name}) {result['status']} in {result['seconds']:.0f} s"
                  + (f": {result.get('reason') or result.get('error')}" if result["status"] != "ok" else ""),
                  flush=True)
            header["wall_s"] = round(time.perf_counter() - started, 1)
            report(results, header, args.out)
    header["wall_s"] = round(time.perf_counter() - started, 1)
    print(report(results, header, args.out))
    print(json.dumps(header | {"out": str(args.out), "steps": results}, default=str))
    return 1 if any(result["status"] == "failed" for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
