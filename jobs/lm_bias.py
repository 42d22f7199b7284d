"""Per-domain LM biasing in one command: domain text (or a phrase list, or both) in; a token LM, its weight (and the
phrases' boost weight) tuned on a dev set, a WER report, and (with --manifest) the domain corpus transcribed with
the chosen setting.

    python jobs/lm_bias.py --text samples/domain/lm_text.txt --dev samples/domain/dev.json \\
        --test samples/domain/test.json --output out/bias
    python jobs/lm_bias.py ... --phrases contacts.txt ...   # and boost these names: the boost weight tuned too
    python jobs/lm_bias.py --phrases contacts.txt --dev ... --output ...   # a phrase list alone, no LM
    python jobs/lm_bias.py ... --manifest 's3://bucket/domain/*.json' --output s3://bucket/bias   # and transcribe

Steps:
1. Checks before any cluster work: the text files exist and hold lines the model's tokenizer can encode, the
   phrase list's every line is a phrase the tokenizer can write (`jobs/transcribe.py::phrase_list_problem`, as
   `jobs/transcribe.py --phrases` checks it), the dev (and test) manifests hold references (`text`) and readable
   rows, the model can run the strategies asked.
2. With --text, the text is normalised as the model's training text was (`pipeline/lm/text.py`: case, numbers
   spelled out, punctuation the tokenizer lacks removed), and a token n-gram LM is built from it with
   `jobs/build_lm.py`: each order of --orders is built on 9 lines in 10 and scored on the 10th; the order with the
   lowest held-out perplexity is rebuilt on every line. Written to OUTPUT/lm/domain.lm with lm.json (how it was made).
3. Each strategy of --strategies (default: greedy, alsd, ctc_greedy and ctc_beam where the model has the head),
   each beam search at each of --beam-sizes (default 4), is tuned in its own Ray task (`pipeline/lm/tuning.py`):
   the dev set is encoded once and decoded once per LM weight (and CTC beam insertion bonus) tried; the test
   set, if given, is decoded with the strategy's baseline and chosen setting. With --phrases, the boost weight
   is searched next, at the LM setting chosen (`pipeline/lm/tuning.py::BOOST_WEIGHTS`; without --text, alone).
   Trials are kept in OUTPUT/tuning/, so a rerun decodes only what it had not.
4. The strategy with the lowest tuned dev WER (ties: the first in --strategies) is chosen; where no LM setting
   beats the same strategy without it on dev, the job says so and that strategy runs without the LM; where no
   boost weight beats the LM setting without boosting, it runs without the phrases.
   OUTPUT/decoding.yaml holds the choice, as `jobs/transcribe.py --config` reads it; OUTPUT/report.md,
   report.json, dev_wer.png (LM weight) and dev_wer_boost.png (boost weight) report every strategy.
5. With --manifest, the corpus is transcribed with the choice into OUTPUT/transcripts/ (exactly once, as
   `jobs/transcribe.py` writes it; a rerun finishes what is missing).

Ray: RAY_ADDRESS or --ray-address, else a private local Ray (`ray job submit -- python jobs/lm_bias.py ...` on a
cluster).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.config import BUNDLED_MODEL, InputConfig, ModelConfig, TranscribeJobConfig  # noqa: E402
from pipeline.decoding.plan import STRATEGIES, DecodingConfig, DecodingError, plan_decoding, strategies_for  # noqa: E402
from pipeline.io.folder import Folder  # noqa: E402
from pipeline.graph import connect_ray  # noqa: E402
from pipeline.lm.text import TextNormaliser, check  # noqa: E402
from pipeline.io.manifest import read_manifest  # noqa: E402
from pipeline.io.redact import redact  # noqa: E402
from pipeline.io.uris import local_path  # noqa: E402

DEFAULT_STRATEGIES = ("greedy", "alsd", "ctc_greedy", "ctc_beam")  # each head's greedy, a beam, CTC beam
ORDERS = (3, 4, 5, 6)
HELDOUT_EVERY = 10
LM_DIR, TUNING_DIR = "lm", "tuning"


class BiasError(ValueError):
    """Input the job cannot use, found before any cluster work: one line for the user."""


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
    from pipeline.model.nemo_file import read_model_facts

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
    """The phrase list at `uri`, fetched and checked as `jobs/transcribe.py --phrases` checks it, for the head of
    each strategy: {"uri", "sha256", "phrases"}; a bad line is a `BiasError` naming the file and line."""
    from decoders.boosting.tree import read_phrase_list
    from jobs.transcribe import phrase_list_problem
    from pipeline.io.fetch import fetch_file, file_sha256
    from pipeline.model.nemo_file import read_model_facts

    try:
        path = str(fetch_file(uri, cache_dir=f"{cache_dir}/phrases", suffix=".txt"))
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
    return {"uri": uri, "sha256": file_sha256(Path(path)), "phrases": len(read_phrase_list(path, uri))}


# ---------------------------------------------------------------------------------------------------- LM
def build_domain_lm(lines: list[str], model_path: str, output: Folder, orders: tuple[int, ...]) -> dict[str, Any]:
    """The LM of the normalised `lines` at OUTPUT/lm/domain.lm, the order chosen on held-out lines; reused when
    lm.json says it was built from the same lines, model and orders."""
    from jobs.build_lm import build_lm

    identity = {"text_sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
                "tokenizer_sha256": _file_sha256(model_path), "orders": list(orders)}
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


def _file_sha256(path: str) -> str:
    from pipeline.io.fetch import file_sha256

    return file_sha256(Path(path))


# ------------------------------------------------------------------------------------------------ tuning
def tune_strategy(strategy: str, beam_size: int, model_uri: str, lm_uri: str | None, cache_dir: str,
                  dev_rows: list[dict], test_rows: list[dict] | None, output_uri: str, identity: dict[str, Any],
                  threads: int, limits: InputConfig, phrases_uri: str | None = None) -> dict[str, Any]:
    """One strategy, in one process (a Ray task on any node): encode dev (and test) once, tune on dev, report
    test. The model, the LM and the phrase list are fetched through the node's cache; the phrases are tokenized
    once."""
    import torch

    from decoders.ngram.lm import NgramLm
    from pipeline import schema
    from pipeline.io.audio import load_audio
    from pipeline.io.fetch import fetch_file
    from pipeline.decoding.fusion import load_boosting_model
    from pipeline.model.nemo import load_asr_model
    from pipeline.lm.tuning import BOOST_WEIGHTS, TrialCache, encode_set, score, transcribe_set, tune

    torch.set_num_threads(threads)
    output = Folder(output_uri)
    model = load_asr_model(model_uri, cache_dir=f"{cache_dir}/models")
    lm_path = str(fetch_file(lm_uri, cache_dir=f"{cache_dir}/lms", suffix=".lm")) if lm_uri else None
    lm = NgramLm.load(lm_path) if lm_path else None
    # the beam size only where the strategy reads it: the chosen config is then what transcribe.py's flags give
    base = DecodingConfig(strategy=strategy, beam_size=beam_size if STRATEGIES[strategy].beam else
                          DecodingConfig().beam_size)
    boosting = phrases_path = None
    if phrases_uri:
        phrases_path = str(fetch_file(phrases_uri, cache_dir=f"{cache_dir}/phrases", suffix=".txt"))
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

    def progress(trial) -> None:
        print(f"lm_bias: {name} {setting_text(_trial_dict(trial), bool(phrases_uri))}: dev WER {trial.wer:.1%} "
              f"({trial.decode_s:.1f} s)", flush=True)

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


def run_tuning(tasks: list[tuple[str, int]], **kwargs: Any) -> list[dict[str, Any]]:
    """Every (strategy, beam size)'s `tune_strategy` as its own Ray task (one CPU each), in parallel on the
    cluster; results in the order of `tasks`."""
    import ray

    task = ray.remote(num_cpus=1, max_retries=1)(tune_strategy)
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
        print(f"lm_bias: {results[index]['name']} tuned ({len(results)}/{len(tasks)})", flush=True)
    return [results[index] for index in range(len(tasks))]


# ------------------------------------------------------------------------------------------------ report
def choose(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The strategy with the lowest tuned dev WER (then CER); ties: the first listed."""
    return min(results, key=lambda r: (r["best"]["wer"], r["best"]["cer"]))


def setting_text(trial: dict[str, Any], phrases: bool = False) -> str:
    """"LM weight 1.5, insertion bonus 6" or "no LM"; with `phrases`, and ", boost weight 0.5" or ", no boosting"."""
    text = "no LM"
    if trial["lm_weight"]:
        bonus = f", insertion bonus {trial['bonus']:g}" if trial["bonus"] is not None else ""
        text = f"LM weight {trial['lm_weight']:g}{bonus}"
    if not phrases:
        return text
    boost = trial.get("boost_weight", 0.0)
    return f"{text}, " + (f"boost weight {boost:g}" if boost else "no boosting")


def _wer_of(result: dict[str, Any], key: str) -> str:
    return f"{result[key]['wer']:.1%}" if key in result else "-"


def table_columns(lm: bool, phrases: bool) -> list[tuple[str, Any]]:
    """The report table's (header, cell of a strategy's result): with an LM and phrases, the LM setting chosen
    without boosting is a column of its own; with phrases alone, the baseline is "no boost"."""
    plain = "no LM" if lm else "no boost"
    both = lm and phrases
    columns = [("strategy", lambda r: r["name"]), ("head", lambda r: r["head"]),
               (f"dev WER {plain}", lambda r: f"{r['baseline']['wer']:.1%}")]
    columns += [("dev WER no boost", lambda r: f"{r['unboosted']['wer']:.1%}")] if both else []
    columns += [("dev WER tuned", lambda r: f"{r['best']['wer']:.1%}"),
                ("dev CER tuned", lambda r: f"{r['best']['cer']:.1%}")]
    columns += [("setting chosen on dev", lambda r: setting_text(r["best"]))] if lm else []
    columns += [("boost weight chosen on dev", lambda r: f"{r['best']['boost_weight']:g}")] if phrases else []
    columns += [(f"test WER {plain}", lambda r: _wer_of(r, "test_baseline"))]
    columns += [("test WER no boost", lambda r: _wer_of(r, "test_unboosted"))] if both else []
    columns += [("test WER tuned", lambda r: _wer_of(r, "test_best")),
                ("test CER tuned", lambda r: f"{r['test_best']['cer']:.1%}" if "test_best" in r else "-"),
                ("decodes (reused)", lambda r: f"{r['decodes']} ({r['reused']})"),
                ("dev decode s", lambda r: f"{r['best']['decode_s']:.1f}")]
    return columns


def report_markdown(report: dict[str, Any]) -> str:
    lm, phrases = report["lm"], report.get("phrases")
    lines = ["# LM biasing report", ""]
    if lm:
        lines += [
            f"Model `{report['model']}`; domain text {', '.join(f'`{t}`' for t in report['text'])}: "
            f"{lm['sentences']} sentences after normalisation ({report['normalisation']}; "
            f"{report['unencodable_lines']} lines dropped: characters the tokenizer lacks).", "",
            f"LM: order {lm['order']} (held-out perplexity per token by order: "
            + ", ".join(f"{o}: {p:.2f}" for o, p in lm["heldout_perplexity_by_order"].items())
            + f"), {sum(lm['ngram_counts'])} n-grams, `{report['lm_uri']}`.", ""]
    else:
        lines += [f"Model `{report['model']}`; no domain text: the phrase list alone, no LM.", ""]
    if phrases:
        lines += [f"Phrases: `{phrases['uri']}`, {phrases['phrases']} phrases; boost weights tried on dev at each "
                  "strategy's " + ("chosen LM setting" if lm else "baseline") + ": 0 (no boosting), "
                  + ", ".join(f"{w:g}" for w in phrases["boost_weights"])
                  + (" (then the LM weight once more either side of the best boost weight)" if lm else "") + ".", ""]
    lines += [
        f"Tuned on `{report['dev']}` ({report['dev_utterances']} utterances)"
        + (f", reported on `{report['test']}` ({report['test_utterances']} utterances, never tuned on)."
           if report.get("test") else "."), ""]
    columns = table_columns(bool(lm), bool(phrases))
    lines += ["| " + " | ".join(header for header, _ in columns) + " |",
              "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(cell(r) for _, cell in columns) + " |" for r in report["strategies"]]
    chosen = report["chosen"]
    lines += ["", f"**Chosen: {chosen['name']}, {setting_text(chosen['best'], bool(phrases))}** "
              f"(dev WER {chosen['best']['wer']:.1%}). `jobs/transcribe.py --config {report['decoding_yaml']}` "
              "transcribes with it."]
    if lm and not chosen["lm_helps"]:
        lines += ["", "No LM setting beat decoding without the LM on dev beyond chance (a lower WER, and more "
                  "utterances improved than made worse, sign test p < 0.05): the LM is not used. The domain text "
                  "may not match the dev set's speech."]
    if phrases and not chosen["boost_helps"]:
        lines += ["", "No boost weight beat decoding without boosting on dev beyond chance (a lower WER, and more "
                  "utterances improved than made worse, sign test p < 0.05): the phrase list is not used. Its "
                  "phrases may be rare in the dev set's speech."]
    if report.get("plot"):
        lines += ["", f"![dev WER against the LM weight]({report['plot']})"]
    if report.get("boost_plot"):
        lines += ["", f"![dev WER against the boost weight]({report['boost_plot']})"]
    if report.get("transcripts"):
        t = report["transcripts"]
        lines += ["", f"Corpus: {t['rows_ok']} transcripts, {t['rows_error']} error rows -> `{t['output']}`."]
    lines += ["", f"Wall time: {report['wall_s']:.0f} s (LM {report['lm_s']:.0f} s, "
              f"tuning {report['tuning_s']:.0f} s)."]
    return "\n".join(lines) + "\n"


def plot_dev_wer(report: dict[str, Any]) -> bytes:
    """PNG: dev WER against the LM weight per strategy, without boosting (CTC beam at its chosen insertion bonus)."""
    from pipeline.reports.plots import new_plot, png

    figure, axes = new_plot()
    for r in report["strategies"]:
        bonus = r["unboosted"]["bonus"]
        points = sorted((t["lm_weight"], t["wer"]) for t in r["trials"] if not t["boost_weight"]
                        and (t["lm_weight"] == 0 or bonus is None or t["bonus"] == bonus))
        label = r["name"] + (f" (bonus {bonus:g})" if bonus is not None else "")
        axes.plot([p[0] for p in points], [100 * p[1] for p in points], marker="o", label=label)
    return png(figure, axes, "LM weight (0: no LM)", "dev WER, %", "Dev WER against the LM weight")


def plot_dev_wer_boost(report: dict[str, Any]) -> bytes:
    """PNG: dev WER against the boost weight per strategy, at the LM setting chosen without boosting."""
    from pipeline.reports.plots import new_plot, png

    figure, axes = new_plot()
    for r in report["strategies"]:
        at = r["unboosted"]
        points = sorted((t["boost_weight"], t["wer"]) for t in r["trials"]
                        if (t["lm_weight"], t["bonus"]) == (at["lm_weight"], at["bonus"]))
        label = r["name"] + (f" ({setting_text(at)})" if at["lm_weight"] else "")
        axes.plot([p[0] for p in points], [100 * p[1] for p in points], marker="o", label=label)
    return png(figure, axes, "boost weight (0: no boosting)", "dev WER, %", "Dev WER against the boost weight")


# ---------------------------------------------------------------------------------------------------- main
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", nargs="+", help="domain text files or URIs, one sentence a line (an LM is built from "
                                              "them; optional with --phrases)")
    p.add_argument("--phrases", metavar="FILE_OR_URI",
                   help="phrases to boost (names, products), one a line, `phrase<TAB>weight` for a phrase's own score "
                        "(as jobs/transcribe.py --phrases): the boost weight is tuned on dev too")
    p.add_argument("--dev", required=True, help="manifest with reference `text`, to tune on")
    p.add_argument("--test", help="manifest with reference `text`, reported, never tuned on")
    p.add_argument("--manifest", nargs="*", default=(), help="the domain corpus to transcribe with the choice")
    p.add_argument("--model", default=str(BUNDLED_MODEL), help="NeMo .nemo (default: the bundled model)")
    p.add_argument("--strategies", nargs="+", help=f"decodings to consider (default: those of "
                                                    f"{', '.join(DEFAULT_STRATEGIES)} the model's heads support)")
    p.add_argument("--output", required=True, help="folder or URI for the LM, report and transcripts")
    p.add_argument("--orders", type=int, nargs="+", default=ORDERS, help="n-gram orders tried (held-out text)")
    p.add_argument("--beam-sizes", "--beam-size", type=int, nargs="+", default=[DecodingConfig().beam_size],
                   help="beam sizes to consider for the beam searches, each tuned as its own candidate")
    p.add_argument("--threads", type=int, default=1, help="torch threads per tuning task")
    p.add_argument("--cache-dir", default=ModelConfig().cache_dir, help="node-local cache of models")
    p.add_argument("--ray-address", help="Ray cluster (default: RAY_ADDRESS, else a private local Ray)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    started = time.perf_counter()
    try:
        return run(args, started)
    except BiasError as error:
        raise SystemExit(f"lm_bias: {redact(str(error))}") from None


def run(args: argparse.Namespace, started: float) -> int:
    from pipeline.io.fetch import fetch_file

    if not args.text and not args.phrases:
        raise BiasError("nothing to bias with: pass --text (domain text, one sentence a line) or --phrases (a phrase "
                        "list, one a line), or both")
    if "://" not in args.model and not Path(args.model).is_file():
        raise BiasError(f"no model at {args.model}: pass --model PATH_OR_URI (a NeMo .nemo file)")
    model_path = str(fetch_file(args.model, cache_dir=f"{args.cache_dir}/models"))
    strategies = chosen_strategies(model_path, args.strategies)
    text = normaliser = None
    if args.text:
        normaliser = TextNormaliser.for_model(model_path)
        text = normaliser.normalise((uri, read_text(uri)) for uri in args.text)
        try:
            check(text, list(args.text))
        except ValueError as error:
            raise BiasError(str(error)) from None
    phrases = checked_phrases(args.phrases, model_path, strategies, args.cache_dir) if args.phrases else None
    phrases_uri = args.phrases
    if phrases_uri and "://" not in phrases_uri:  # read alike by every task, actor and decoding.yaml, wherever they run
        phrases_uri = str(Path(phrases_uri).resolve())
    dev_rows = reference_rows(args.dev, "--dev")
    test_rows = reference_rows(args.test, "--test") if args.test else None
    if args.manifest:
        from pipeline.io.uris import expand_manifest_uris

        try:
            expand_manifest_uris(args.manifest)
        except FileNotFoundError as error:
            raise BiasError(f"--manifest: {error}") from None
    output = Folder(args.output)
    print("lm_bias: " + (f"{text.read} lines of domain text ({normaliser.describe()}; {text.unencodable} dropped), "
                         if text else "")
          + (f"{phrases['phrases']} phrases, " if phrases else "")
          + f"dev {len(dev_rows)}" + (f", test {len(test_rows)}" if test_rows else "")
          + f" utterances; strategies {', '.join(strategies)}", flush=True)

    lm = lm_uri = None
    if text:
        lm = build_domain_lm(text.lines, model_path, output, tuple(args.orders))
        print(f"lm_bias: LM order {lm['order']} ({'reused' if lm['reused'] else 'built'}): held-out perplexity "
              + ", ".join(f"order {o}: {p:.2f}" for o, p in lm["heldout_perplexity_by_order"].items()), flush=True)
        lm_uri = output.uri_of(f"{LM_DIR}/domain.lm")
    lm_s = time.perf_counter() - started

    connect_ray(args.ray_address)
    identity = {"lm_identity": lm["identity"] if lm else None, "lm_order": lm["order"] if lm else None,
                "model_sha256": _file_sha256(model_path),
                "dev": [(r["audio_filepath"], r["offset"], r["duration"], r["reference_text"]) for r in dev_rows]}
    if phrases:  # only then: trials stored before --phrases existed keep their identity, and are reused
        identity["phrases_sha256"] = phrases["sha256"]
    tuning_started = time.perf_counter()
    results = run_tuning(candidates(strategies, args.beam_sizes), model_uri=args.model, lm_uri=lm_uri,
                         cache_dir=args.cache_dir, dev_rows=dev_rows, test_rows=test_rows,
                         output_uri=output.uri, identity=identity, threads=args.threads, limits=InputConfig(),
                         phrases_uri=phrases_uri)
    tuning_s = time.perf_counter() - tuning_started
    chosen = choose(results)
    decoding = DecodingConfig(**chosen["decoding"])
    import yaml

    from pipeline.lm.tuning import BOOST_WEIGHTS

    output.write("decoding.yaml", yaml.safe_dump({"model": {"uri": args.model},
                                                  "decoding": dataclasses.asdict(decoding)}, sort_keys=False))
    report: dict[str, Any] = {
        "model": args.model, "text": list(args.text or ()), "normalisation": normaliser and normaliser.describe(),
        "unencodable_lines": text and text.unencodable, "lm": lm, "lm_uri": lm_uri,
        "phrases": phrases and {**phrases, "boost_weights": list(BOOST_WEIGHTS)}, "dev": args.dev,
        "dev_utterances": len(dev_rows), "test": args.test, "test_utterances": len(test_rows or []),
        "strategies": results, "chosen": chosen, "decoding": dataclasses.asdict(decoding),
        "decoding_yaml": output.uri_of("decoding.yaml"), "plot": "dev_wer.png" if lm else None,
        "boost_plot": "dev_wer_boost.png" if phrases else None, "lm_s": lm_s, "tuning_s": tuning_s}
    if lm:
        output.write("dev_wer.png", plot_dev_wer(report))
        if not chosen["lm_helps"]:
            print(f"lm_bias: no LM setting beat {chosen['name']} without the LM on dev beyond chance: the LM is "
                  "not used", flush=True)
    if phrases:
        output.write("dev_wer_boost.png", plot_dev_wer_boost(report))
        if not chosen["boost_helps"]:
            print(f"lm_bias: no boost weight beat {chosen['name']} without boosting on dev beyond chance: the phrase "
                  "list is not used", flush=True)
    if args.manifest:
        from pipeline.graph import run_transcription

        config = TranscribeJobConfig(manifests=tuple(args.manifest), output=output.uri_of("transcripts"),
                                     model=ModelConfig(uri=args.model, cache_dir=args.cache_dir), decoding=decoding)
        summary = run_transcription(config)
        report["transcripts"] = {"output": config.output, "rows_ok": summary["rows_ok"],
                                 "rows_error": summary["rows_error"], "this_run_rows": summary["this_run"]["rows"]}
    report["wall_s"] = time.perf_counter() - started
    output.write("report.json", json.dumps(report, indent=1, default=str))
    markdown = report_markdown(report)
    output.write("report.md", markdown)
    print(markdown, flush=True)
    print(f"lm_bias: report -> {output.uri_of('report.md')}; decoding -> {output.uri_of('decoding.yaml')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
