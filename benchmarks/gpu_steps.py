"""The steps of `benchmarks/gpu_run.py`, one function each (the job's, step 5, in `benchmarks/gpu_job.py`), and what
they share: the run's context (device, budget, toy or full sizes) and the transducer models they decode with.

Every step runs on a CUDA device at full size and, in the dry run, on the CPU at toy sizes through the same code;
where a part can only run on a GPU (CUDA graphs, the Triton kernel, GPU memory) the CPU takes its CPU path and the
figures say so. A part whose package is missing (NeMo, Ray, KenLM, jiwer) is left out with a note naming it; a
step that cannot run at all raises `StepSkipped`. A step returns its figures; a check that does not hold (tokens
unlike NeMo's, graphs unlike eager, a fallback taken on a GPU) goes into the figures' `problems`, which fails the
step without losing its figures. What each step proves, and the figures once a GPU has run them: docs/gpu.md.

Dims: B batch, T frames, D encoder features, V vocabulary.
"""

from __future__ import annotations

import importlib.util
import json
import random
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPOSITORY = Path(__file__).resolve().parent.parent
PRODUCTION_SHAPE = "parakeet-tdt-0.6b"


class StepSkipped(Exception):
    """A step that cannot run here: the message is the reason."""


@dataclass
class RunContext:
    """What every step gets: where it runs, how much time is left, and what earlier steps built (`cache`)."""

    device: str  # "cuda", or "cpu" for the dry run
    dry_run: bool
    work: Path  # scratch space, removed at the end
    models_dir: Path  # saved production shapes (recipes/production_shapes/build.py --out), used where present
    budget_s: float
    started: float = field(default_factory=time.perf_counter)
    decoder_layers: int = 2  # encoder layers of the production shape the decoder steps encode with
    job_layers: int | None = None  # the job's production shape (None: full depth)
    job_audio_s: float = 3600.0
    cache: dict[str, Any] = field(default_factory=dict)

    def pick(self, full: Any, toy: Any) -> Any:
        """`full` on a GPU, `toy` in the dry run."""
        return toy if self.dry_run else full

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    def left_s(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def cached(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]


def missing(*modules: str) -> list[str]:
    """The modules of `modules` that cannot be imported here."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def need(*modules: str) -> None:
    absent = missing(*modules)
    if absent:
        raise StepSkipped(f"{', '.join(absent)} not installed")


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed_runs(runs: dict[str, Callable[[], Any]], repeats: int, device: str) -> tuple[dict[str, float], dict]:
    """Median ms of each run over `repeats` interleaved rounds after a warm-up round (`benchmarks/_timing.py`),
    and what each returned."""
    from benchmarks._timing import interleaved_ms

    times, outputs = interleaved_ms(runs, repeats, device)
    return {name: round(statistics.median(values), 3) for name, values in times.items()}, outputs


# --- the transducer models the decoder steps use ------------------------------------------------------------------
@dataclass
class Subject:
    """A transducer to decode with: a NeMo model (`model`, with its audio) or, without NeMo, a stand-in of the same
    widths (`decoders.transducer.TinyTransducer`) on random encoder output."""

    name: str
    about: str
    transducer: Any  # decoders.protocols.TransducerModel
    max_symbols: int
    vocab_size: int
    is_tdt: bool
    encoder_dim: int
    model: Any = None  # pipeline.model.AsrModel, or None for a stand-in
    waveforms: list[np.ndarray] | None = None

    def encoded(self, ctx: RunContext, batch_size: int, utterances: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """`utterances` utterances in batches of `batch_size`: encoder_output [B, T, D], encoder_lengths [B] on the
        device (the bundled speech through the encoder, or random frames for a stand-in)."""
        batches = []
        generator = torch.Generator().manual_seed(batch_size)
        for start in range(0, utterances, batch_size):
            count = min(batch_size, utterances - start)
            if self.model is not None:
                from pipeline.decoding import pad_waveforms

                group = [self.waveforms[(start + i) % len(self.waveforms)] for i in range(count)]
                batches.append(self.model.encode(*pad_waveforms(group)))
            else:  # 8 s utterances, ragged as after bucketing
                frames = ctx.pick(100, 30)
                lengths = torch.randint(int(frames * 0.8), frames + 1, (count,), generator=generator)
                lengths[0] = frames
                output = torch.randn(count, frames, self.encoder_dim, generator=generator)
                batches.append((output.to(ctx.device), lengths.to(ctx.device)))
        return batches


def bundled_waveforms(count: int) -> list[np.ndarray]:
    """The first `count` of the repository's spoken files (samples/, then samples/domain/audio/: 170, 1.3-7 s)."""
    from benchmarks.production_shapes import bundled_files, read_audio

    return [read_audio(path) for path in bundled_files()[:count]]


def production_tokenizer(ctx: RunContext) -> Path:
    """The production shape's tokenizer: the saved one under `models_dir`, else trained here once."""
    from recipes.production_shapes.shapes import shape_named, train_tokenizer

    shape = shape_named(PRODUCTION_SHAPE)
    saved = ctx.models_dir / f"tokenizer_{shape.text}_{shape.vocab_size}"
    if (saved / "tokenizer.model").exists():
        return saved
    return ctx.cached("tokenizer", lambda: train_tokenizer(ctx.work / "tokenizer", shape.vocab_size, shape.text))


def production_shape(ctx: RunContext, layers: int | None):
    """parakeet-tdt-0.6b at `layers` encoder layers; in the dry run its vocabulary, kind and durations on a tiny
    encoder (`tests/support/production_shapes.py::tiny`)."""
    from recipes.production_shapes.shapes import shape_named

    shape = shape_named(PRODUCTION_SHAPE, layers)
    if ctx.dry_run:
        from tests.support.production_shapes import tiny

        shape = tiny(shape)
    return shape


def production_model(ctx: RunContext):
    """The production shape at `decoder_layers` (decoder cost does not depend on the encoder's depth), restored
    from `models_dir` where saved, else built and calibrated as the recipe does, on the device."""
    from pipeline.model import AsrModel, load_asr_model
    from recipes.production_shapes.shapes import PRODUCTION_CALIBRATION, build_random_model, calibrate_emission
    from recipes.production_shapes.shapes import sample_waveforms as calibration_waveforms

    shape = production_shape(ctx, ctx.decoder_layers)
    saved = ctx.models_dir / f"{shape.name}.nemo"
    if saved.exists():
        return load_asr_model(str(saved), cache_dir=ctx.work / "cache", device=ctx.device), f"{saved}"
    nemo_model = build_random_model(shape, production_tokenizer(ctx))
    calibrate_emission(nemo_model, calibration_waveforms(8), **PRODUCTION_CALIBRATION)
    return AsrModel(nemo_model.to(ctx.device)), f"{shape.name} built here ({shape.n_layers} encoder layers)"


def transducer_subjects(ctx: RunContext) -> list[Subject]:
    """The production shape (TDT, 1,024 cased pieces) and the bundled demo model (RNN-T, 256 pieces); without
    NeMo, stand-ins of their decoder widths (encoder 1024 / 176, prediction and joint 640 / 320)."""
    def make() -> list[Subject]:
        if missing("nemo"):
            from decoders.transducer import TinyTransducer, calibrate_blank_bias

            subjects = []
            for name, vocab_size, encoder_dim, width, durations in (
                    ("production_widths", 1024, 1024, 640, (0, 1, 2, 3, 4)), ("demo_widths", 256, 176, 320, ())):
                vocab_size, encoder_dim = ctx.pick(vocab_size, 64), ctx.pick(encoder_dim, 32)
                width = ctx.pick(width, 32)
                model = TinyTransducer(vocab_size=vocab_size, encoder_dim=encoder_dim, prediction_dim=width,
                                       joint_dim=width, durations=durations, seed=0)
                calibrate_blank_bias(model, frames_per_label=3.0)
                subjects.append(Subject(name, f"TinyTransducer stand-in of its decoder widths (nemo_toolkit not "
                                        f"installed), V={vocab_size}", model.to(ctx.device), 10, vocab_size,
                                        bool(durations), encoder_dim))
            return subjects
        from pipeline.config import BUNDLED_MODEL
        from pipeline.model import load_asr_model

        waveforms = bundled_waveforms(ctx.pick(128, 8))
        production, about = production_model(ctx)
        demo = load_asr_model(str(BUNDLED_MODEL), cache_dir=ctx.work / "cache", device=ctx.device)
        return [Subject(name, about, model.transducer, model.max_symbols, model.tokenizer.vocab_size,
                        bool(model.facts.durations), int(model.config.encoder.d_model), model, waveforms)
                for name, model, about in ((PRODUCTION_SHAPE, production, about),
                                           ("demo", demo, f"{BUNDLED_MODEL.name} (bundled)"))]

    return ctx.cached("subjects", make)


def over_batches(decode: Callable, batches: list) -> Callable[[], list]:
    """A run of `decode` over every batch -> one list of hypotheses (ours as host lists, NeMo's as they come)."""
    def run() -> list:
        hypotheses = []
        for batch in batches:
            result = decode(*batch)
            hypotheses += result.to_list() if hasattr(result, "to_list") else list(result)
        return hypotheses

    return run


def token_lists(hypotheses: list) -> list[list[int]]:
    """Ours (`Hypothesis.tokens`) or NeMo's (`y_sequence`) -> token ids."""
    return [[int(t) for t in h.y_sequence] if hasattr(h, "y_sequence") else list(h.tokens) for h in hypotheses]


def same_count(got: list[list[int]], expected: list[list[int]]) -> int:
    return sum(a == b for a, b in zip(got, expected, strict=True))


def graphs_note(ctx: RunContext, decoder, name: str, problems: list[str]) -> None:
    """On a GPU, a decoder asked for graphs must have replayed them, not fallen back."""
    if ctx.cuda and not decoder.graph_fallback.graphs_on:
        problems.append(f"{name}: CUDA graphs fell back to eager ({decoder.graph_fallback.error})")


# --- step 1 --------------------------------------------------------------------------------------------------------
GPU_TEST_WARNINGS = ("error:the Triton n-gram kernel failed:RuntimeWarning",
                     "error:.*CUDA graphs failed:RuntimeWarning")


def gpu_tests_step(ctx: RunContext) -> dict:
    """`pytest -m gpu` on the test files that hold GPU tests, with a fallback (Triton -> torch, graphs -> eager)
    made an error, so a GPU test cannot pass on the fallback."""
    files = sorted(str(path.relative_to(REPOSITORY)) for path in (REPOSITORY / "tests").rglob("test_*.py")
                   if "mark.gpu" in path.read_text(errors="replace"))
    report = ctx.work / "gpu_tests.xml"
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
               *[f"-W{rule}" for rule in GPU_TEST_WARNINGS], *files]
    notes = []
    if missing("soundfile"):  # tests/conftest.py reads audio for other tests; the GPU tests need none of it
        command.insert(3, "--noconftest")
        notes.append("soundfile not installed: ran with --noconftest (the GPU tests use no conftest fixture)")
        if not ctx.cuda:  # without conftest.py nothing skips the GPU tests on a CPU: only collect them
            command.insert(3, "--collect-only")
            notes.append("no CUDA device: the GPU tests were collected, not run")
    timeout_s = max(30.0, min(ctx.left_s(), ctx.pick(300.0, 120.0)))
    try:
        result = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"files": files, "problems": [f"pytest did not finish in {timeout_s:.0f} s"], "notes": notes}
    counts: dict[str, int] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed: list[str] = []
    skip_reasons: set[str] = set()
    if report.exists():
        root = ElementTree.parse(report).getroot()
        for suite in root.iter("testsuite"):
            for key in counts:
                counts[key] += int(suite.get(key, 0))
        for case in root.iter("testcase"):
            for kind in ("failure", "error"):
                for element in case.findall(kind):
                    message = (element.get("message") or kind).splitlines()[0][:200]
                    failed.append(f"{case.get('classname')}::{case.get('name')}: {message}")
            for element in case.findall("skipped"):
                skip_reasons.add((element.get("message") or "")[:120])
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    figures = {"files": len(files), "passed": passed, "failed": counts["failures"] + counts["errors"],
               "skipped": counts["skipped"], "skip_reasons": sorted(skip_reasons), "failures": failed[:20],
               "returncode": result.returncode, "notes": notes}
    if "--collect-only" in command:
        figures["collected"] = sum("::" in line for line in result.stdout.splitlines())
    if result.returncode not in (0, 5):  # 5: nothing collected
        figures["problems"] = failed[:5] or [f"pytest exited {result.returncode}: {result.stdout[-500:]}"]
    if ctx.cuda and passed == 0:
        figures.setdefault("problems", []).append("no GPU test ran on a CUDA device")
    return figures


# --- step 2 --------------------------------------------------------------------------------------------------------
def greedy_step(ctx: RunContext) -> dict:
    """Label-looping greedy with and without CUDA graphs, WIND W=8, and NeMo's greedy_batch: the same tokens, and
    their speed, at batch 1, 32 and 128."""
    from decoders.transducer import GreedyConfig, LabelLoopingGreedy

    problems: list[str] = []
    figures: dict[str, Any] = {"subjects": {}, "cuda_graphs": ctx.cuda, "notes": []}
    if not ctx.cuda:
        figures["notes"].append("no CUDA device: the graphs rows run the eager path (the graph fallback is tested "
                                "on the CPU in tests/decoders/transducer/test_cuda_graph_fallback.py)")
    for subject in transducer_subjects(ctx):
        nemo = None
        if subject.model is not None:
            from benchmarks._nemo import NemoDecoding

            nemo = NemoDecoding(subject.model, "transducer", "greedy_batch")
        else:
            figures["notes"].append(f"{subject.name}: no NeMo comparison (nemo_toolkit not installed)")
        decoders = {
            "graphs": LabelLoopingGreedy(subject.transducer, GreedyConfig(max_symbols=subject.max_symbols)),
            "eager": LabelLoopingGreedy(subject.transducer, GreedyConfig(max_symbols=subject.max_symbols,
                                                                         use_cuda_graphs=False)),
            "wind_w8_graphs": LabelLoopingGreedy(subject.transducer, GreedyConfig(max_symbols=subject.max_symbols,
                                                                                  window_size=8)),
        }
        rows = []
        for batch_size in ctx.pick([1, 32, 128], [1, 4]):
            utterances = ctx.pick(16, 2) if batch_size == 1 else batch_size
            batches = subject.encoded(ctx, batch_size, utterances)
            runs = {name: over_batches(decoder, batches) for name, decoder in decoders.items()
                    if name != "wind_w8_graphs" or batch_size == 1}
            if nemo is not None:
                nemo.activate()
                runs["nemo_greedy_batch"] = over_batches(nemo.decoder_only, batches)
            times, outputs = timed_runs(runs, ctx.pick(5, 1), ctx.device)
            expected = token_lists(outputs["eager"])
            same = {name: same_count(token_lists(output), expected) for name, output in outputs.items()}
            for name, count in same.items():
                if count != utterances:
                    problems.append(f"{subject.name} B={batch_size}: {name} has the eager tokens on {count}/"
                                    f"{utterances} utterances")
            row = {"batch_size": batch_size, "utterances": utterances,
                   "ms_per_utterance": {name: round(ms / utterances, 3) for name, ms in times.items()},
                   "same_tokens_as_eager": same,
                   "graphs_over_eager": round(times["eager"] / times["graphs"], 3)}
            if "nemo_greedy_batch" in times:
                row["nemo_over_graphs"] = round(times["nemo_greedy_batch"] / times["graphs"], 3)
            if "wind_w8_graphs" in times:
                row["wind_w8_over_graphs"] = round(times["graphs"] / times["wind_w8_graphs"], 3)
            rows.append(row)
        for name in ("graphs", "wind_w8_graphs"):
            graphs_note(ctx, decoders[name], f"{subject.name} {name}", problems)
        figures["subjects"][subject.name] = {"about": subject.about, "vocab_size": subject.vocab_size,
                                             "tdt": subject.is_tdt, "rows": rows}
    figures["problems"] = problems
    return figures


# --- step 3 --------------------------------------------------------------------------------------------------------
def lm_advance_figures(ctx: RunContext, problems: list[str], notes: list[str]) -> dict:
    """NgramLm.advance over the whole vocabulary: the Triton kernel against the torch twin and KenLM."""
    from benchmarks.ngram import best_of, kenlm_advance, random_lm_ngrams, reached_states
    from decoders.ngram import NgramLm, triton_failure, write_arpa

    vocab_size, order, batch_size = ctx.pick(1024, 128), 6, ctx.pick(32, 4)
    rng = random.Random(0)
    ngrams = random_lm_ngrams(rng, order, vocab_size, ctx.pick(100_000, 2_000))
    path = ctx.work / "advance.arpa"
    write_arpa(path, ngrams)
    torch_lm = NgramLm.from_arpa(path, vocab_size, use_triton=False).to(ctx.device)
    states, histories = reached_states(torch_lm, ngrams, batch_size, rng)
    repeats = ctx.pick(20, 2)
    expected = torch_lm.advance(states)
    figures: dict[str, Any] = {"vocab_size": vocab_size, "order": order, "batch_size": batch_size,
                               "ngrams": sum(torch_lm.ngram_counts),
                               "torch_ms": round(best_of(lambda: torch_lm.advance(states), repeats, ctx.device), 3)}
    if ctx.cuda and not missing("triton"):
        triton_lm = NgramLm(torch_lm.tensors, torch_lm.ngram_counts, use_triton=True)
        scores, next_states = triton_lm.advance(states)
        figures["triton_ms"] = round(best_of(lambda: triton_lm.advance(states), repeats, ctx.device), 3)
        figures["triton_max_abs_diff"] = float((scores - expected[0]).abs().max())
        figures["triton_same_next_states"] = bool(torch.equal(next_states, expected[1]))
        figures["triton_over_torch"] = round(figures["torch_ms"] / figures["triton_ms"], 3)
        if triton_failure() is not None:
            problems.append(f"the Triton kernel fell back to torch: {triton_failure()}")
        elif figures["triton_max_abs_diff"] > 1e-5 or not figures["triton_same_next_states"]:
            problems.append(f"Triton and torch advance differ (max |diff| {figures['triton_max_abs_diff']:.2g})")
    else:
        notes.append("Triton advance: " + ("triton not installed" if missing("triton") else
                                           "no CUDA device (tests/decoders/ngram checks the kernel under "
                                           "TRITON_INTERPRET=1)"))
    if missing("kenlm"):
        notes.append("KenLM comparison: kenlm not installed")
    else:
        import kenlm

        model = kenlm.Model(str(path))
        from decoders.ngram import id_to_token

        words = [id_to_token(label) for label in range(vocab_size)]
        reference = torch.tensor(kenlm_advance(model, kenlm, histories, words), dtype=torch.float64) * np.log(10)
        figures["kenlm_max_abs_diff"] = float((expected[0].double().cpu() - reference).abs().max())
        if figures["kenlm_max_abs_diff"] > 1e-3:
            problems.append(f"NgramLm and KenLM differ by {figures['kenlm_max_abs_diff']:.2g}")
    return figures


def subject_lm(ctx: RunContext, subject: Subject):
    """A random order-4 token LM over the subject's vocabulary, on the device."""
    from benchmarks.ngram import random_lm_ngrams
    from decoders.ngram import NgramLm, write_arpa

    path = ctx.work / f"lm_{subject.name}.arpa"
    write_arpa(path, random_lm_ngrams(random.Random(1), 4, subject.vocab_size, ctx.pick(20_000, 500)))
    return NgramLm.from_arpa(path, subject.vocab_size).to(ctx.device)


def beam_step(ctx: RunContext) -> dict:
    """ALSD++ against NeMo's malsd_batch; ALSD++ and WIND beam with a GPU n-gram LM, CUDA graphs against eager;
    the Triton advance against the torch one and KenLM."""
    from decoders.transducer import AlsdBeamSearch, BeamSearchConfig, WindBeamSearch

    problems: list[str] = []
    notes: list[str] = []
    figures: dict[str, Any] = {"advance": lm_advance_figures(ctx, problems, notes), "subjects": {}}
    beam_size, lm_weight = 4, 0.3
    for subject in transducer_subjects(ctx):
        lm = subject_lm(ctx, subject)

        def search(kind, graphs: bool, fused: bool, subject=subject, lm=lm):
            config = BeamSearchConfig(beam_size=beam_size, max_symbols_per_frame=subject.max_symbols,
                                      lm_weight=lm_weight if fused else 0.0, use_cuda_graphs=graphs)
            return kind(subject.transducer, config, lm if fused else None, device=ctx.device)

        searches = {"alsd_graphs": search(AlsdBeamSearch, True, False),
                    "alsd_eager": search(AlsdBeamSearch, False, False),
                    "alsd_lm_graphs": search(AlsdBeamSearch, True, True),
                    "alsd_lm_eager": search(AlsdBeamSearch, False, True)}
        if subject.model is None:  # its blank is never confident: WIND's window emits max_symbols on every frame
            notes.append(f"{subject.name}: no WIND beam (a random stand-in says nothing of it: benchmarks/beam.py)")
        elif not subject.is_tdt:  # WIND beam search is RNN-T only
            searches["wind_lm_graphs"] = search(WindBeamSearch, True, True)
            searches["wind_lm_eager"] = search(WindBeamSearch, False, True)
        nemo = None
        if subject.model is not None:
            from benchmarks._nemo import NemoDecoding

            nemo = NemoDecoding(subject.model, "transducer", "malsd_batch", beam_size)
        rows = []
        for batch_size in ctx.pick([1, 32], [1, 4]):
            utterances = ctx.pick(8, 2) if batch_size == 1 else batch_size
            batches = subject.encoded(ctx, batch_size, utterances)
            runs = {name: over_batches(decoder, batches) for name, decoder in searches.items()}
            if nemo is not None:
                nemo.activate()
                runs["nemo_malsd_batch"] = over_batches(nemo.decoder_only, batches)
            times, outputs = timed_runs(runs, ctx.pick(3, 1), ctx.device)
            same = {}
            for graphs, eager in (("alsd_graphs", "alsd_eager"), ("alsd_lm_graphs", "alsd_lm_eager"),
                                  ("wind_lm_graphs", "wind_lm_eager"), ("nemo_malsd_batch", "alsd_eager")):
                if graphs in outputs:
                    same[f"{graphs} = {eager}"] = same_count(token_lists(outputs[graphs]),
                                                             token_lists(outputs[eager]))
            for pair, count in same.items():
                if count != utterances:
                    problems.append(f"{subject.name} B={batch_size}: {pair} on {count}/{utterances} utterances")
            rows.append({"batch_size": batch_size, "utterances": utterances,
                         "ms_per_utterance": {name: round(ms / utterances, 3) for name, ms in times.items()},
                         "same_tokens": same})
        for name in ("alsd_graphs", "alsd_lm_graphs", "wind_lm_graphs"):
            if name in searches:
                graphs_note(ctx, searches[name], f"{subject.name} {name}", problems)
        figures["subjects"][subject.name] = {"about": subject.about, "beam_size": beam_size, "lm_weight": lm_weight,
                                             "rows": rows}
        if nemo is None:
            notes.append(f"{subject.name}: no NeMo comparison (nemo_toolkit not installed)")
    from decoders.ngram import triton_failure

    if ctx.cuda and triton_failure() is not None:
        problems.append(f"the Triton kernel fell back to torch in the searches: {triton_failure()}")
    figures["notes"], figures["problems"] = notes, problems
    return figures


# --- step 4 --------------------------------------------------------------------------------------------------------
def ctc_step(ctx: RunContext) -> dict:
    """Blank collapse and the CTC prefix beam search (with an n-gram LM) on the device, against the compiled CPU
    search the writer actors run, on peaky synthetic emissions (`benchmarks/ctc.py`'s)."""
    from benchmarks.ctc import load_lms, make_inputs, run_ours
    from decoders.ctc import CpuCtcBeamSearch, CtcBeamConfig, CtcBeamSearch, CtcGreedy, collapse_blanks

    vocab_size = ctx.pick(1024, 128)
    blank_id = vocab_size - 1
    shape = Namespace(utterances=ctx.pick(64, 8), frames=ctx.pick(250, 60))
    batch_size = ctx.pick(32, 4)
    folder = ctx.work / "ctc"
    folder.mkdir(exist_ok=True)
    table_lm, lm, lm_name, _ = load_lms(vocab_size, folder, seed=vocab_size)
    log_probs, lengths, _ = make_inputs(shape, vocab_size, table_lm, seed=vocab_size)
    device_lm = lm.to(ctx.device)

    def config(threshold):
        return CtcBeamConfig(beam_size=8, lm_weight=0.5, beam_threshold=10.0, token_min_log_prob=-5.0,
                             max_labels_per_frame=16, collapse_threshold=threshold)

    on_device = log_probs.to(ctx.device), lengths.to(ctx.device)
    runs = {
        "collapse_0.9": lambda: collapse_blanks(*on_device, blank_id, 0.9),
        "greedy": lambda: run_ours(CtcGreedy(blank_id), log_probs, lengths, batch_size, ctx.device),
        "beam": lambda: run_ours(CtcBeamSearch(blank_id, config(None), device_lm), log_probs, lengths, batch_size,
                                 ctx.device),
        "beam_collapse_0.9": lambda: run_ours(CtcBeamSearch(blank_id, config(0.9), device_lm), log_probs, lengths,
                                              batch_size, ctx.device),
    }
    times, outputs = timed_runs(runs, ctx.pick(3, 1), ctx.device)
    cpu_tokens = run_ours(CpuCtcBeamSearch(blank_id, config(0.9), lm), log_probs, lengths, batch_size, "cpu")
    _, cpu_lengths, _ = collapse_blanks(log_probs, lengths, blank_id, 0.9)
    device_lengths = outputs["collapse_0.9"][1].cpu()
    utterances = shape.utterances
    figures = {"vocab_size": vocab_size, "utterances": utterances, "frames": shape.frames, "lm": lm_name,
               "beam_size": 8, "ms_per_utterance": {name: round(ms / utterances, 3) for name, ms in times.items()},
               "frames_kept_at_0.9": round(float(cpu_lengths.sum() / lengths.sum()), 4),
               "collapse_same_lengths_as_cpu": bool(torch.equal(device_lengths, cpu_lengths)),
               "beam_same_tokens_as_cpu_compiled": same_count(outputs["beam_collapse_0.9"], cpu_tokens),
               "collapse_speedup": round(times["beam"] / times["beam_collapse_0.9"], 3)}
    problems = []
    if not figures["collapse_same_lengths_as_cpu"]:
        problems.append("blank collapse on the device kept other frames than on the CPU")
    if figures["beam_same_tokens_as_cpu_compiled"] != utterances:
        problems.append(f"the device's CTC beam equals the writer's compiled search on "
                        f"{figures['beam_same_tokens_as_cpu_compiled']}/{utterances} utterances")
    figures["problems"] = problems
    return figures


# --- step 6 --------------------------------------------------------------------------------------------------------
def autocast_step(ctx: RunContext) -> dict:
    """The bundled model's encoder under fp16 and bf16 autocast against fp32 on the bundled sets: WER and the
    transcripts greedy decoding gives, and the encoder's speed."""
    need("nemo", "soundfile")
    import soundfile

    from decoders.transducer import GreedyConfig, LabelLoopingGreedy
    from pipeline.config import BUNDLED_MODEL
    from pipeline.decoding import pad_waveforms
    from pipeline.model import load_asr_model

    model = load_asr_model(str(BUNDLED_MODEL), cache_dir=ctx.work / "cache", device=ctx.device)
    decoder = LabelLoopingGreedy(model.transducer, GreedyConfig(max_symbols=model.max_symbols))
    waveforms, references = [], []
    for manifest in (REPOSITORY / "samples/domain/test.json", REPOSITORY / "samples/domain/dev.json",
                     REPOSITORY / "samples/manifest.json"):
        for line in manifest.read_text().splitlines()[:ctx.pick(None, 4)]:
            row = json.loads(line)
            waveforms.append(soundfile.read(manifest.parent / row["audio_filepath"], dtype="float32")[0])
            references.append(row.get("text", ""))
    order = sorted(range(len(waveforms)), key=lambda i: len(waveforms[i]), reverse=True)
    batches = [order[start:start + 16] for start in range(0, len(order), 16)]
    padded = [pad_waveforms([waveforms[i] for i in batch]) for batch in batches]
    audio_s = sum(len(w) for w in waveforms) / 16000
    precisions = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}

    def run(dtype):
        texts = [""] * len(waveforms)
        synchronize(ctx.device)
        started = time.perf_counter()
        outputs = []
        for audio, lengths in padded:
            with torch.autocast(ctx.device, dtype=dtype, enabled=dtype is not None):
                outputs.append(model.encode(audio, lengths))
        synchronize(ctx.device)
        encode_s = time.perf_counter() - started
        for batch, (output, lengths) in zip(batches, outputs):
            for row, hypothesis in zip(batch, decoder(output.float(), lengths).to_list()):
                texts[row] = model.tokenizer.ids_to_text(hypothesis.tokens)
        return encode_s, texts

    figures: dict[str, Any] = {"utterances": len(waveforms), "audio_s": round(audio_s, 1), "precisions": {},
                               "notes": []}
    results = {}
    for name, dtype in precisions.items():
        try:
            run(dtype)  # warm-up (kernels, autocast caches)
            results[name] = min((run(dtype) for _ in range(ctx.pick(3, 1))), key=lambda result: result[0])
        except Exception as error:  # noqa: BLE001  (a precision this device cannot run is a figure, not a failure)
            figures["notes"].append(f"{name}: {type(error).__name__}: {str(error).splitlines()[0][:200]}")
    scoring = not missing("jiwer")
    if not scoring:
        figures["notes"].append("WER: jiwer not installed (transcripts compared with fp32's only)")
    for name, (encode_s, texts) in results.items():
        entry = {"encode_s": round(encode_s, 3), "encoder_rtfx": round(audio_s / encode_s, 1),
                 "same_text_as_fp32": sum(a == b for a, b in zip(texts, results["fp32"][1]))}
        if scoring:
            from pipeline.reports.scoring import error_rates

            entry["wer"] = round(error_rates(references, texts).wer, 4)
        figures["precisions"][name] = entry
    if scoring and "fp32" in results:
        for name in ("fp16", "bf16"):
            if name in figures["precisions"]:
                figures["precisions"][name]["wer_minus_fp32"] = round(
                    figures["precisions"][name]["wer"] - figures["precisions"]["fp32"]["wer"], 4)
    return figures


__all__ = ["PRODUCTION_SHAPE", "RunContext", "StepSkipped", "autocast_step", "beam_step", "ctc_step", "gpu_tests_step",
           "greedy_step", "missing", "need", "production_shape", "production_tokenizer", "synchronize"]
