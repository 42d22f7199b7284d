"""Per-domain LM biasing, the library of `jobs/lm_bias.py`: its inputs checked before any cluster work, the domain
LM built, each candidate decoding tuned in its own Ray task, the best one chosen, and its report written.

`prepare_bias` reads and checks everything a run needs before Ray starts (text, phrase list, dev and test sets,
strategies); `run_bias` builds the LM (`build_domain_lm`: the order chosen on held-out lines, `pipeline/lm/build.py`),
tunes (`run_tuning` -> `tune_strategy`, `pipeline/lm/tuning.py`), chooses (`choose`), writes `decoding.yaml` and
the report (`pipeline/reports/lm_bias.py`), and with manifests transcribes them with the choice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config import InputConfig, ModelConfig, TranscribeJobConfig
from pipeline.decoding import STRATEGIES, DecodingConfig, DecodingError, plan_decoding, strategies_for
from pipeline.io import Folder, local_path, read_manifest
from pipeline.lm.text import NormalisedText, TextNormaliser, check
from pipeline.preflight import fetched_model, phrase_list_problem
from pipeline.reports.lm_bias import plot_dev_wer, plot_dev_wer_boost, rate_cell, report_markdown, setting_text
from pipeline.settings import check_settings, setting, shared

DEFAULT_STRATEGIES = ("greedy", "alsd", "ctc_greedy", "ctc_beam")  # each head's greedy, a beam, CTC beam
ORDERS = (3, 4, 5, 6)
HELDOUT_EVERY = 10
LM_DIR, TUNING_DIR = "lm", "tuning"


class BiasError(ValueError):
    """Input the job cannot use, found before any cluster work, or a tuning task that failed: one line for the
    user."""


@dataclass(frozen=True)
class BiasConfig:
    """One biasing run: what to bias with (`text`, `phrases`, or both), what to tune on (`dev`) and report on
    (`test`), the corpus to transcribe with the choice (`manifest`), and where everything goes (`output`)."""

    dev: str = setting(help="manifest with reference `text`, to tune on")
    output: str = setting(help="folder or URI for the LM, report and transcripts")
    text: tuple[str, ...] = setting(
        (), "domain text files or URIs, one sentence a line (an LM is built from them; optional with --phrases)")
    phrases: str | None = setting(
        None, "phrases to boost (names, products), one a line, `phrase<TAB>weight` for a phrase's own score (as "
              "jobs/transcribe.py --phrases): the boost weight is tuned on dev too", metavar="FILE_OR_URI")
    test: str | None = setting(None, "manifest with reference `text`, reported, never tuned on")
    manifest: tuple[str, ...] = setting((), "the domain corpus to transcribe with the choice")
    model: str = shared(TranscribeJobConfig, "model.uri")
    strategies: tuple[str, ...] = setting(
        (), "decodings to consider", default_help=f"those of {', '.join(DEFAULT_STRATEGIES)} the model's heads support")
    orders: tuple[int, ...] = setting(ORDERS, "n-gram orders tried (held-out text)")
    beam_sizes: tuple[int, ...] = setting(
        (DecodingConfig().beam_size,), "beam sizes to consider for the beam searches, each tuned as its own candidate",
        aliases=("--beam-size",))
    threads: int = setting(1, "torch threads per tuning task", minimum=1)
    cache_dir: str = shared(TranscribeJobConfig, "model.cache_dir")
    ray_address: str | None = shared(TranscribeJobConfig, "ray_address")

    def __post_init__(self) -> None:
        check_settings(self)

def print_line(line: str) -> None:
    """A progress line of the job on the driver's console."""
    print(f"lm_bias: {line}", flush=True)


# ------------------------------------------------------------------------------------------------- checks
def read_text(uri: str) -> list[str]:
    import fsspec

    try:
        with fsspec.open(uri, "rt", encoding="utf-8", compression="infer") as handle:
            return handle.read().splitlines()
    except FileNotFoundError:
        raise BiasError(f"--text {uri}: no such file") from None
    except (OSError, UnicodeDecodeError, EOFError) as error:
        raise BiasError(f"--text {uri}: cannot read it ({type(error).__name__}: {error})") from None


def reference_rows(uri: str, flag: str) -> list[dict[str, Any]]:
    """A dev or test manifest's rows, each with its reference: an unusable row or a missing `text` is an error."""
    try:
        rows = list(read_manifest(uri))
    except Exception as error:  # read_manifest turns bad lines into rows; this is a manifest it cannot list
        raise BiasError(f"{flag} {uri}: {error}") from None
    if not rows:
        raise BiasError(f"{flag} {uri}: no line")
    from pipeline import schema

    for row in rows:
        if row[schema.STATUS] != schema.STATUS_OK:
            raise BiasError(f"{flag}: {row[schema.ERROR]}")
        if not row[schema.REFERENCE_TEXT].strip():
            raise BiasError(f"{flag} {uri}, line {row[schema.LINE]}: no reference `text` (a {flag} manifest "
                            "needs one on every line)")
        local = local_path(row[schema.AUDIO_FILEPATH])
        if local is not None and not os.path.isfile(local):
            raise BiasError(f"{flag} {uri}, line {row[schema.LINE]}: no audio file {local}")
    return rows


def chosen_strategies(model_path: str, asked: list[str] | None) -> list[str]:
    from pipeline.model import read_model_facts

    facts = read_model_facts(model_path)
    supported = strategies_for(facts)
    if not asked:
        return [s for s in DEFAULT_STRATEGIES if s in supported]
    for name in asked:
        if name not in STRATEGIES:
            raise BiasError(f"--strategies: unknown {name!r} (known: {', '.join(STRATEGIES)})")
        try:
            plan_decoding(facts, DecodingConfig(strategy=name), model_name=model_path)
        except DecodingError as error:
            raise BiasError(str(error)) from None
    return list(dict.fromkeys(asked))


def checked_phrases(uri: str, model_path: str, strategies: list[str], cache_dir: str) -> dict[str, Any]:
    """The phrase list at `uri`, fetched and checked as `jobs/transcribe.py --phrases` checks it
    (`pipeline/preflight.py::phrase_list_problem`), for the head of each strategy: {"uri", "sha256", "phrases"};
    a bad line is a `BiasError` naming the file and line."""
    from decoders.boosting import read_phrase_list
    from pipeline.io import cached_sha256, fetch_file, phrases_dir
    from pipeline.model import read_model_facts

    try:
        path = str(fetch_file(uri, cache_dir=phrases_dir(cache_dir), suffix=".txt"))
    except FileNotFoundError:
        raise BiasError(f"--phrases {uri}: no such file (a phrase list: one phrase a line)") from None
    except OSError as error:
        raise BiasError(f"--phrases {uri}: cannot read it ({type(error).__name__}: {error})") from None
    facts = read_model_facts(model_path)
    heads = {}
    for name in strategies:  # the tokens are checked against each head decoded (a hybrid's heads may differ)
        plan = plan_decoding(facts, DecodingConfig(strategy=name), model_name=model_path)
        heads.setdefault(plan.head, plan)
    for plan in heads.values():
        problem = phrase_list_problem(path, model_path, plan, name=uri)
        if problem:
            raise BiasError(f"--phrases {problem}")
    return {"uri": uri, "sha256": cached_sha256(path, phrases_dir(cache_dir)),
            "phrases": len(read_phrase_list(path, uri))}


@dataclass
class BiasInputs:
    """What `prepare_bias` read and checked before any cluster work."""

    model_path: str  # the model on this machine
    model_sha256: str  # its content, hashed once per version of the file on this node (`cached_sha256`)
    strategies: list[str]
    normaliser: TextNormaliser | None  # with text
    text: NormalisedText | None
    phrases: dict[str, Any] | None  # `checked_phrases`
    phrases_uri: str | None  # as every task, actor and decoding.yaml reads it (a local one made absolute)
    dev_rows: list[dict[str, Any]]
    test_rows: list[dict[str, Any]] | None
    output: Folder

    def describe(self) -> str:
        """One line: what was read (lines of text, phrases, utterances) and the strategies to tune."""
        text, normaliser = self.text, self.normaliser
        return ((f"{text.read} lines of domain text ({normaliser.describe()}; {text.unencodable} dropped), "
                 if text else "")
                + (f"{self.phrases['phrases']} phrases, " if self.phrases else "")
                + f"dev {len(self.dev_rows)}" + (f", test {len(self.test_rows)}" if self.test_rows else "")
                + f" utterances; strategies {', '.join(self.strategies)}")


def prepare_bias(config: BiasConfig) -> BiasInputs:
    """Everything a run reads before any cluster work, checked (`BiasError`, or a `PreflightError` for the
    model): the model (fetched), the strategies it can run, the text (normalised as the model's training text
    was), the phrase list, the dev and test sets, the corpus's manifests."""
    from pipeline.io import cached_sha256, models_dir

    if not config.text and not config.phrases:
        raise BiasError("nothing to bias with: pass --text (domain text, one sentence a line) or --phrases (a phrase "
                        "list, one a line), or both")
    model_path = str(fetched_model(config.model, config.cache_dir))
    model_sha256 = cached_sha256(model_path, models_dir(config.cache_dir))
    strategies = chosen_strategies(model_path, list(config.strategies))
    text = normaliser = None
    if config.text:
        normaliser = TextNormaliser.for_model(model_path)
        text = normaliser.normalise((uri, read_text(uri)) for uri in config.text)
        try:
            check(text, list(config.text))
        except ValueError as error:
            raise BiasError(str(error)) from None
    phrases = checked_phrases(config.phrases, model_path, strategies, config.cache_dir) if config.phrases else None
    phrases_uri = config.phrases
    phrases_path = local_path(phrases_uri) if phrases_uri else None
    if phrases_path is not None:  # read alike by every task, actor and decoding.yaml, wherever they run
        phrases_uri = str(Path(phrases_path).resolve())
    dev_rows = reference_rows(config.dev, "--dev")
    test_rows = reference_rows(config.test, "--test") if config.test else None
    if config.manifest:
        from pipeline.io import expand_manifest_uris

        try:
            expand_manifest_uris(config.manifest)
        except FileNotFoundError as error:
            raise BiasError(f"--manifest: {error}") from None
    return BiasInputs(model_path=model_path, model_sha256=model_sha256, strategies=strategies,
                      normaliser=normaliser, text=text, phrases=phrases, phrases_uri=phrases_uri, dev_rows=dev_rows,
                      test_rows=test_rows, output=Folder(config.output))


# ---------------------------------------------------------------------------------------------------- LM
def build_domain_lm(lines: list[str], model_path: str, model_sha256: str, output: Folder,
                    orders: tuple[int, ...]) -> dict[str, Any]:
    """The LM of the normalised `lines` at OUTPUT/lm/domain.lm, the order chosen on held-out lines; reused when
    lm.json says it was built from the same lines, model (`model_sha256`, its file's) and orders."""
    from pipeline.lm.build import build_lm

    identity = {"text_sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
                "tokenizer_sha256": model_sha256, "orders": list(orders)}
    stored = output.read(f"{LM_DIR}/lm.json")
    if stored and json.loads(stored).get("identity") == identity:
        return {**json.loads(stored), "reused": True}
    with tempfile.TemporaryDirectory(prefix="lsbias") as scratch:
        text = Path(scratch) / "text.txt"
        text.write_text("\n".join(lines) + "\n", encoding="utf-8")
        perplexity = {}
        for order in orders:
            report = build_lm([text], model_path, Path(scratch) / f"order{order}.lm", order=order,
                              heldout_every=HELDOUT_EVERY, tool="varikn")
            perplexity[order] = report.heldout_perplexity
        best = min(orders, key=lambda order: (perplexity[order], order))
        report = build_lm([text], model_path, Path(scratch) / "domain.lm", order=best, tool="varikn")
        output.put(f"{LM_DIR}/domain.lm", str(Path(scratch) / "domain.lm"))
        output.write(f"{LM_DIR}/text.txt", text.read_text(encoding="utf-8"))
    built = {"identity": identity, "order": best, "heldout_perplexity_by_order": perplexity,
             "heldout_every": HELDOUT_EVERY, "ngram_counts": report.ngram_counts, "sentences": len(lines),
             "build_s": report.seconds}
    output.write(f"{LM_DIR}/lm.json", json.dumps(built, indent=1))
    return {**built, "reused": False}


# ------------------------------------------------------------------------------------------------ tuning
def tune_strategy(strategy: str, beam_size: int, model_uri: str, lm_uri: str | None, cache_dir: str,
                  dev_rows: list[dict], test_rows: list[dict] | None, output_uri: str, identity: dict[str, Any],
                  threads: int, limits: InputConfig, phrases_uri: str | None = None) -> dict[str, Any]:
    """One strategy, in one process (a Ray task on any node): encode dev (and test) once, tune on dev, report
    test. The model, the LM and the phrase list are fetched through the node's cache; the phrases are tokenized
    once."""
    import torch

    from decoders.ngram import NgramLm
    from pipeline import schema
    from pipeline.decoding import load_boosting_model
    from pipeline.io import fetch_file, lms_dir, load_audio, models_dir, phrases_dir
    from pipeline.lm.tuning import BOOST_WEIGHTS, TrialCache, encode_set, score, transcribe_set, tune
    from pipeline.model import load_asr_model

    torch.set_num_threads(threads)
    output = Folder(output_uri)
    model = load_asr_model(model_uri, cache_dir=models_dir(cache_dir))
    lm_path = str(fetch_file(lm_uri, cache_dir=lms_dir(cache_dir), suffix=".lm")) if lm_uri else None
    lm = NgramLm.load(lm_path) if lm_path else None
    # the beam size only where the strategy reads it: the chosen config is then what transcribe.py's flags give
    base = DecodingConfig(strategy=strategy, beam_size=beam_size if STRATEGIES[strategy].beam else
                          DecodingConfig().beam_size)
    boosting = phrases_path = None
    if phrases_uri:
        phrases_path = str(fetch_file(phrases_uri, cache_dir=phrases_dir(cache_dir), suffix=".txt"))
        boosting = load_boosting_model(plan_decoding(model.facts, dataclasses.replace(
            base, phrases_uri=phrases_uri, boost_weight=1.0)), model, cache_dir)
    rate = model.facts.sample_rate

    def encoded(rows: list[dict]):
        waveforms = [load_audio(r[schema.AUDIO_FILEPATH], rate, r[schema.OFFSET], r[schema.DURATION] or None,
                                channel=r[schema.CHANNEL], limits=limits).samples for r in rows]
        return encode_set(model, waveforms, [r[schema.REFERENCE_TEXT] for r in rows], sample_rate=rate)

    started = time.perf_counter()
    dev = encoded(dev_rows)
    encode_s = time.perf_counter() - started

    def with_setting(weight: float, bonus: float | None, boost: float) -> DecodingConfig:
        return dataclasses.replace(base, lm_uri=lm_path if weight else None, lm_weight=weight,
                                   ctc_insertion_bonus=base.ctc_insertion_bonus if bonus is None else bonus,
                                   phrases_uri=phrases_path if boost else None, boost_weight=boost or base.boost_weight)

    def evaluate(weight: float, bonus: float | None, boost: float = 0.0):
        return score(dev.references, transcribe_set(model, with_setting(weight, bonus, boost), lm, dev, boosting))

    plan = plan_decoding(model.facts, base)
    name = candidate_name(strategy, beam_size if plan.strategy.beam else None)

    def progress(trial) -> None:  # printed by the task: Ray sends it to the driver's console
        print(f"lm_bias: {name} {setting_text(_trial_dict(trial), bool(phrases_uri))}: dev WER "
              f"{rate_cell(_trial_dict(trial))} ({trial.decode_s:.1f} s)", flush=True)

    steps = f"{name.replace(' ', '-')}.json"
    cache = TrialCache({**identity, "strategy": strategy, "beam_size": beam_size},
                       output.read(f"{TUNING_DIR}/{steps}"), lambda text: output.write(f"{TUNING_DIR}/{steps}", text))
    result = tune(base, evaluate, cache, progress, lm=lm is not None,
                  boost_weights=BOOST_WEIGHTS if boosting is not None else ())
    report: dict[str, Any] = {
        "name": name, "strategy": strategy, "beam_size": beam_size if plan.strategy.beam else None,
        "head": plan.head, "lm_helps": result.lm_helps, "boost_helps": result.boost_helps,
        "decoding": dataclasses.asdict(result.chosen(base, lm_uri, phrases_uri)),
        "baseline": _trial_dict(result.baseline), "unboosted": _trial_dict(result.unboosted),
        "best": _trial_dict(result.best), "trials": [_trial_dict(t) for t in result.trials],
        "decodes": result.decodes,
        "reused": result.reused, "dev_encode_s": round(encode_s, 2), "dev_audio_s": round(dev.audio_s, 2)}
    if test_rows:
        test = encoded(test_rows)
        measured_by_key: dict[str, dict[str, float]] = {}
        compared = [("test_baseline", result.baseline), ("test_best", result.best)]
        if phrases_uri:
            compared.insert(1, ("test_unboosted", result.unboosted))
        for key, trial in compared:
            if trial.key not in measured_by_key:
                clock = time.perf_counter()
                measured = score(test.references, transcribe_set(
                    model, with_setting(trial.lm_weight, trial.bonus, trial.boost_weight), lm, test, boosting))
                measured_by_key[trial.key] = {"wer": measured.wer, "cer": measured.cer,
                                              "written_wer": measured.written_wer,
                                              "written_cer": measured.written_cer,
                                              "decode_s": round(time.perf_counter() - clock, 3)}
            report[key] = measured_by_key[trial.key]
    return report


def _trial_dict(trial) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(trial).items() if k != "errors"}


def candidate_name(strategy: str, beam_size: int | None) -> str:
    return strategy if beam_size is None else f"{strategy} beam {beam_size}"


def candidates(strategies: list[str], beam_sizes: list[int]) -> list[tuple[str, int]]:
    """(strategy, beam size) to tune: every beam size for a beam search, the first for the others."""
    return [(name, size) for name in strategies
            for size in (beam_sizes if STRATEGIES[name].beam else beam_sizes[:1])]


def run_tuning(tasks: list[tuple[str, int]], say: Callable[[str], None] = print_line, **kwargs: Any
               ) -> list[dict[str, Any]]:
    """Every (strategy, beam size)'s `tune_strategy` as its own Ray task (one CPU each), in parallel on the
    cluster; results in the order of `tasks`, each announced through `say` as it comes."""
    import ray

    # max_calls=1: a worker ends with its task, and with it the model it loaded (about 6 GB at 0.6b), instead of
    # idling beside the transcription that follows
    task = ray.remote(num_cpus=1, max_retries=1, max_calls=1)(tune_strategy)
    pending = {task.remote(name, size, **kwargs): index for index, (name, size) in enumerate(tasks)}
    results: dict[int, dict[str, Any]] = {}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        index = pending.pop(done[0])
        try:
            results[index] = ray.get(done[0])
        except Exception as error:  # Ray keeps the task's traceback as text: its last line says what failed
            cause = [line for line in str(error).splitlines() if line.strip()][-1:] or [type(error).__name__]
            raise BiasError(f"tuning {tasks[index][0]} failed: {cause[0]}") from None
        say(f"{results[index]['name']} tuned ({len(results)}/{len(tasks)})")
    return [results[index] for index in range(len(tasks))]


def choose(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The strategy with the lowest tuned dev WER (then CER), normalised; ties: the first listed."""
    return min(results, key=lambda r: (r["best"]["wer"], r["best"]["cer"]))


def run_bias(config: BiasConfig, inputs: BiasInputs, started: float, say: Callable[[str], None] = print_line
             ) -> dict[str, Any]:
    """The domain LM built, every candidate tuned on the cluster and the best chosen; `decoding.yaml`, the
    report and its plots written, and with `config.manifest` the corpus transcribed with the choice. Returns the
    report (also in report.json and report.md); `started` is when the job started (its times count from there)."""
    from pipeline.graph import connect_ray, run_transcription
    from pipeline.lm.tuning import BOOST_WEIGHTS
    from pipeline.reports.scoring import NORMALISED, WRITTEN

    output, text, phrases, dev_rows, test_rows = (inputs.output, inputs.text, inputs.phrases, inputs.dev_rows,
                                                  inputs.test_rows)
    lm = lm_uri = None
    if text:
        lm = build_domain_lm(text.lines, inputs.model_path, inputs.model_sha256, output, tuple(config.orders))
        say(f"LM order {lm['order']} ({'reused' if lm['reused'] else 'built'}): held-out perplexity "
            + ", ".join(f"order {o}: {p:.2f}" for o, p in lm["heldout_perplexity_by_order"].items()))
        lm_uri = output.uri_of(f"{LM_DIR}/domain.lm")
    lm_s = time.perf_counter() - started

    connect_ray(config.ray_address)
    identity = {"lm_identity": lm["identity"] if lm else None, "lm_order": lm["order"] if lm else None,
                "model_sha256": inputs.model_sha256,
                "dev": [(r["audio_filepath"], r["offset"], r["duration"], r["reference_text"]) for r in dev_rows]}
    if phrases:  # only then: trials stored before --phrases existed keep their identity, and are reused
        identity["phrases_sha256"] = phrases["sha256"]
    tuning_started = time.perf_counter()
    results = run_tuning(candidates(inputs.strategies, list(config.beam_sizes)), say=say, model_uri=config.model,
                         lm_uri=lm_uri, cache_dir=config.cache_dir, dev_rows=dev_rows, test_rows=test_rows,
                         output_uri=output.uri, identity=identity, threads=config.threads, limits=InputConfig(),
                         phrases_uri=inputs.phrases_uri)
    tuning_s = time.perf_counter() - tuning_started
    chosen = choose(results)
    decoding = DecodingConfig(**chosen["decoding"])
    import yaml

    output.write("decoding.yaml", yaml.safe_dump({"model": {"uri": config.model},
                                                  "decoding": dataclasses.asdict(decoding)}, sort_keys=False))
    normaliser = inputs.normaliser
    report: dict[str, Any] = {
        "model": config.model, "text": list(config.text), "normalisation": normaliser and normaliser.describe(),
        "normalisation_rules": normaliser and normaliser.rules(), "recased": text and text.recased,
        "punctuated": text and text.punctuated, "tokenizer_punctuation": normaliser and normaliser.punctuation,
        "scoring": {"wer": NORMALISED, "written_wer": WRITTEN},
        "unencodable_lines": text and text.unencodable, "lm": lm, "lm_uri": lm_uri,
        "phrases": phrases and {**phrases, "boost_weights": list(BOOST_WEIGHTS)}, "dev": config.dev,
        "dev_utterances": len(dev_rows), "test": config.test, "test_utterances": len(test_rows or []),
        "strategies": results, "chosen": chosen, "decoding": dataclasses.asdict(decoding),
        "decoding_yaml": output.uri_of("decoding.yaml"), "plot": "dev_wer.png" if lm else None,
        "boost_plot": "dev_wer_boost.png" if phrases else None, "lm_s": lm_s, "tuning_s": tuning_s}
    if lm:
        output.write("dev_wer.png", plot_dev_wer(report))
        if not chosen["lm_helps"]:
            say(f"no LM setting beat {chosen['name']} without the LM on dev beyond chance: the LM is not used")
    if phrases:
        output.write("dev_wer_boost.png", plot_dev_wer_boost(report))
        if not chosen["boost_helps"]:
            say(f"no boost weight beat {chosen['name']} without boosting on dev beyond chance: the phrase list is "
                "not used")
    if config.manifest:
        transcription = TranscribeJobConfig(
            manifests=tuple(config.manifest), output=output.uri_of("transcripts"),
            model=ModelConfig(uri=config.model, cache_dir=config.cache_dir), decoding=decoding)
        summary = run_transcription(transcription)
        report["transcripts"] = {"output": transcription.output, "rows_ok": summary["rows_ok"],
                                 "rows_error": summary["rows_error"], "this_run_rows": summary["this_run"]["rows"]}
    report["wall_s"] = time.perf_counter() - started
    output.write("report.json", json.dumps(report, indent=1, default=str))
    output.write("report.md", report_markdown(report))
    return report
