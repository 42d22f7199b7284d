"""What a domain n-gram LM, a beam and blank collapse do to accuracy, on the bundled model and domain sets.

The bundled demo model (`models/demo_hybrid_rnnt_ctc.nemo`, trained on general English) decodes the bundled
domain sets (`samples/domain/`: banking and device commands, with contact names and phrasing that its training
text lacks). A token-level LM is built from `samples/domain/lm_text.txt` with `python jobs/build_lm.py`
(the model's own tokenizer, read from the `.nemo`); each strategy's LM weight is chosen on `dev.json`
(50 utterances) on a full grid, with CTC beam search's insertion bonus (token LMs favour short outputs), and
reported on `test.json` (100). "x greedy" is test WER relative to greedy decoding of the same head without an
LM (lower is better). The grid is the reference surface; beside its pick, each row shows what the LM biasing
job's search (`pipeline.lm.tuning.tune`, as `jobs/lm_bias.py` runs it) picks on the same dev set, and how many dev
decodes each needed (both count the setting without the LM). Both pick by dev WER, then CER, then the smaller
weight and bonus; the grid always reports its best LM setting, the search falls back to no LM where its best
does not beat no LM on dev beyond chance (`pipeline.lm.tuning.beats_beyond_chance`: lower WER and a sign test).
Encoding, decoding and scoring are `pipeline/lm/tuning.py`'s; the encoder runs once per set. "decode s" is one
run of decoding alone on the test set, to show what the LM costs here; speed comparisons belong to beam.py,
ctc.py and ngram.py, which interleave their runs. Also printed: the share of encoder frames that blank
collapse (at the default threshold, 0.9) leaves to the CTC beam search. Scoring is jiwer's WER and CER on the
transcripts as decoded.

    python benchmarks/accuracy.py            # every strategy, LM weights 0.1-2.0 (and bonuses 0-6)
    python benchmarks/accuracy.py --quick    # four strategies, a grid of one LM setting (the search in full):
                                             # under a minute on a 2-core CPU

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import soundfile  # noqa: E402
import torch  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from benchmarks._timing import machine  # noqa: E402
from decoders.ngram import NgramLm  # noqa: E402
from pipeline.config import BUNDLED_MODEL, BUNDLED_TDT_MODEL  # noqa: E402
from pipeline.decoding import DecodingConfig, compact_ctc_log_probs, plan_decoding, strategies_for  # noqa: E402
from pipeline.lm import (  # noqa: E402
    EncodedSet,
    Score,
    TrialCache,
    build_lm,  # noqa: E402
    encode_set,
    score,
    setting_key,
    takes_bonus,
    transcribe_set,
    tune,
)
from pipeline.model import AsrModel, load_asr_model  # noqa: E402

FULL_WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0)
QUICK_WEIGHTS = (0.6,)
FULL_BONUSES = (0.0, 1.0, 2.0, 3.0, 4.0, 6.0)  # ctc_beam's insertion bonus, per label, tried with every weight
QUICK_BONUSES = (2.0,)


def read_set(manifest: Path, batch_size: int, model: AsrModel) -> EncodedSet:
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    audio = [soundfile.read(manifest.parent / row["audio_filepath"], dtype="float32")[0] for row in rows]
    return encode_set(model, audio, [row["text"] for row in rows], batch_size, model.facts.sample_rate)


def frames_kept(model: AsrModel, encoded: EncodedSet, decoding: DecodingConfig) -> float:
    """The share of encoder frames that blank collapse leaves to a writer-stage search (CTC beam search)."""
    plan = plan_decoding(model.facts, decoding)
    kept = total = 0
    with torch.no_grad():
        for output, lengths, _ in encoded.batches:
            kept += sum(len(frames) for _, frames in compact_ctc_log_probs(model, output, lengths, plan))
            total += int(lengths.sum())
    return kept / total


def strategies(quick: bool, beam_size: int, model: AsrModel) -> list[tuple[str, DecodingConfig, bool]]:
    """(row name, decoding without an LM, whether the row also runs with the LM), for the strategies the model
    can run."""
    rows = [  # (name, decoding, with the LM too, in --quick)
        ("greedy", DecodingConfig(strategy="greedy"), True, True),
        ("alsd", DecodingConfig(strategy="alsd", beam_size=beam_size), True, True),
        ("aes", DecodingConfig(strategy="aes", beam_size=beam_size), True, False),
        ("aes_skip", DecodingConfig(strategy="aes_skip", beam_size=beam_size), True, False),
        ("wind_beam", DecodingConfig(strategy="wind_beam", beam_size=beam_size), True, False),
        ("ctc_greedy", DecodingConfig(strategy="ctc_greedy"), True, True),
        ("ctc_beam", DecodingConfig(strategy="ctc_beam", beam_size=beam_size), True, True),
        ("ctc_beam, no collapse", DecodingConfig(strategy="ctc_beam", beam_size=beam_size,
                                                 ctc_collapse_threshold=None), True, False),
    ]
    rows = [(name, decoding, fuse) for name, decoding, fuse, in_quick in rows if in_quick or not quick]
    return [row for row in rows if row[1].strategy in strategies_for(model.facts)]


class Settings:
    """One strategy's dev and test decodes by LM setting (weight 0: no LM), each decoded once: the grid and the
    search share them."""

    def __init__(self, model: AsrModel, base: DecodingConfig, lm: NgramLm, lm_path: str, dev: EncodedSet,
                 test: EncodedSet) -> None:
        self.model, self.base, self.lm, self.lm_path, self.sets = model, base, lm, lm_path, {"dev": dev, "test": test}
        self.scores: dict[tuple[str, str], tuple[Score, float]] = {}  # (set, key) -> score, decode s

    def config(self, weight: float, bonus: float | None) -> DecodingConfig:
        bonus = self.base.ctc_insertion_bonus if bonus is None or not weight else bonus
        return dataclasses.replace(self.base, lm_uri=self.lm_path if weight else None, lm_weight=weight,
                                   ctc_insertion_bonus=bonus)

    def key(self, weight: float, bonus: float | None) -> str:
        config = self.config(weight, bonus)
        return setting_key(config.lm_weight, config.ctc_insertion_bonus if takes_bonus(config) else None)

    def scored(self, name: str, weight: float, bonus: float | None) -> tuple[Score, float]:
        """(score, decode s) of the set `name` ("dev" or "test") decoded with this setting."""
        key = (name, self.key(weight, bonus))
        if key not in self.scores:
            encoded = self.sets[name]
            clock = time.perf_counter()
            hypotheses = transcribe_set(self.model, self.config(weight, bonus), self.lm, encoded)
            seconds = time.perf_counter() - clock
            self.scores[key] = (score(encoded.references, hypotheses), seconds)
        return self.scores[key]

    def evaluate(self, weight: float, bonus: float | None) -> Score:
        """`tune`'s evaluate: the dev set's score."""
        return self.scored("dev", weight, bonus)[0]


def grid(settings: Settings, weights: Sequence[float], bonuses: Sequence[float]) -> list[tuple[float, float | None]]:
    """The settings of the full grid: no LM, then every weight (for ctc_beam, with every insertion bonus)."""
    bonused = takes_bonus(settings.base)
    return [(0.0, None)] + [(w, b if bonused else None) for w in weights for b in (bonuses if bonused else (None,))]


def pick(settings: Settings, candidates: list[tuple[float, float | None]]) -> tuple[float, float | None]:
    """The LM setting with the lowest dev WER (then CER, the smaller weight, the smaller bonus): `tune`'s order."""
    def order(setting: tuple[float, float | None]) -> tuple[float, float, float, float]:
        measured = settings.scored("dev", *setting)[0]
        return measured.wer, measured.cer, setting[0], setting[1] or 0.0

    return min((c for c in candidates if c[0] > 0), key=order)


def describe(weight: float, bonus: float | None, none: str = "0") -> str:
    if not weight:
        return none
    return f"{weight:g}" + (f", bonus {bonus:g}" if bonus is not None else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="greedy, alsd, ctc_greedy, ctc_beam; a grid of LM weight 0.6 (bonus 2) only")
    parser.add_argument("--model", default=str(BUNDLED_MODEL),
                        help=f"a hybrid .nemo, e.g. the TDT variant {BUNDLED_TDT_MODEL.relative_to(REPOSITORY)}")
    parser.add_argument("--domain", default=str(REPOSITORY / "samples" / "domain"),
                        help="folder with lm_text.txt, dev.json and test.json")
    parser.add_argument("--order", type=int, default=6, help="n-gram order of the domain LM (tokens)")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--weights", type=float, nargs="+", help="LM weights of the dev grid (default: 0.1-2.0)")
    parser.add_argument("--bonuses", type=float, nargs="+",
                        help="ctc_beam insertion bonuses of the dev grid (default: 0-6)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    weights = tuple(args.weights or (QUICK_WEIGHTS if args.quick else FULL_WEIGHTS))
    bonuses = tuple(args.bonuses or (QUICK_BONUSES if args.quick else FULL_BONUSES))
    domain = Path(args.domain)

    model = load_asr_model(args.model)
    started = time.perf_counter()
    dev, test = (read_set(domain / f"{name}.json", args.batch_size, model) for name in ("dev", "test"))
    encode_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as scratch:
        heldout = Path(scratch) / "heldout.txt"
        heldout.write_text("\n".join(dev.references + test.references) + "\n")
        lm_path = str(Path(scratch) / "domain.lm")
        built = time.perf_counter()
        report = build_lm([domain / "lm_text.txt"], args.model, lm_path, order=args.order, heldout=[heldout])
        build_s = time.perf_counter() - built
        lm = NgramLm.load(lm_path)

        results = []
        greedy_wer: dict[str, float] = {}
        for name, decoding, fuse in strategies(args.quick, args.beam_size, model):
            settings = Settings(model, decoding, lm, lm_path, dev, test)
            candidates = grid(settings, weights, bonuses) if fuse else [(0.0, None)]
            for candidate in candidates:
                settings.scored("dev", *candidate)
            chosen = [(0.0, None)] + ([pick(settings, candidates)] if fuse else [])
            searched = tune(decoding, settings.evaluate, TrialCache({})) if fuse else None
            for weight, bonus in chosen:
                dev_wer = settings.scored("dev", weight, bonus)[0].wer
                measured, seconds = settings.scored("test", weight, bonus)
                wer, cer = measured.wer, measured.cer
                plan = plan_decoding(model.facts, settings.config(weight, bonus))
                head = plan.head
                if not plan.fuses_lm and not plan.strategy.beam and not plan.strategy.windowed:  # the greedy rows
                    greedy_wer[head] = wer
                result = {"strategy": name, "head": head, "lm_weight": weight, "insertion_bonus": bonus,
                          "dev_wer": dev_wer, "test_wer": wer, "test_cer": cer, "decode_s": seconds,
                          "grid_decodes": len(candidates) if weight else None,
                          "dev_wer_by_setting": ({settings.key(*c): settings.scored("dev", *c)[0].wer
                                                  for c in candidates} if weight else None)}
                if weight and searched is not None:
                    best = searched.best
                    result["tune"] = {"lm_weight": best.lm_weight, "insertion_bonus": best.bonus if best.lm_weight
                                      else None, "dev_wer": best.wer, "dev_cer": best.cer,
                                      "test_wer": settings.scored("test", best.lm_weight, best.bonus)[0].wer,
                                      "decodes": searched.decodes, "lm_helps": searched.lm_helps,
                                      "tried": [t.key for t in searched.trials]}
                results.append(result)
                searched_text = ""
                if "tune" in result:
                    found = result["tune"]
                    searched_text = (f"; tune: {describe(found['lm_weight'], found['insertion_bonus'], 'no LM')}, "
                                     f"dev {found['dev_wer']:.1%}, {found['decodes']} decodes")
                print(f"  {name} lm_weight {describe(weight, bonus)}: dev {dev_wer:.1%}, test {wer:.1%} "
                      f"({seconds:.1f} s){searched_text}", flush=True)

    print(f"\nmodel {Path(args.model).name}; dev {len(dev.references)} / test {len(test.references)} utterances "
          f"(encoded in {encode_s:.1f} s); domain LM: order {report.order}, {sum(report.ngram_counts)} n-grams, "
          f"built in {build_s:.1f} s, perplexity {report.heldout_perplexity:.2f} per token on dev + test text")
    print(f"beam size {args.beam_size}; dev grid of LM weights: {', '.join(f'{w:g}' for w in weights)}; "
          f"ctc_beam insertion bonuses: {', '.join(f'{b:g}' for b in bonuses)}")
    threshold = DecodingConfig().ctc_collapse_threshold
    kept = frames_kept(model, test, DecodingConfig(strategy="ctc_beam"))
    print(f"blank collapse at {threshold} (ctc_beam rows) keeps {kept:.1%} of the test set's encoder frames\n")
    print("| strategy | head | LM weight (grid's pick on dev) | dev WER | test WER | test CER | x greedy "
          "| decode s (test) | dev decodes (grid) | tune's pick: dev WER, test WER (dev decodes) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        r["x_greedy"] = r["test_wer"] / greedy_wer[r["head"]] if greedy_wer.get(r["head"]) else None
        ratio = f"{r['x_greedy']:.2f}" if r["x_greedy"] is not None else "-"
        searched = r.get("tune")
        tuned = (f"{describe(searched['lm_weight'], searched['insertion_bonus'], 'no LM')}: {searched['dev_wer']:.1%}, "
                 f"{searched['test_wer']:.1%} ({searched['decodes']})" if searched else "-")
        print(f"| {r['strategy']} | {r['head']} | {describe(r['lm_weight'], r['insertion_bonus'])} | "
              f"{r['dev_wer']:.1%} | {r['test_wer']:.1%} | {r['test_cer']:.1%} | {ratio} | {r['decode_s']:.2f} | "
              f"{r['grid_decodes'] or '-'} | {tuned} |")
    lm_figures = {"order": report.order, "ngrams": sum(report.ngram_counts), "perplexity": report.heldout_perplexity}
    print(json.dumps({"benchmark": "accuracy", "quick": args.quick, "model": Path(args.model).name,
                      "dev_utterances": len(dev.references), "test_utterances": len(test.references),
                      "beam_size": args.beam_size, "collapse_frames_kept": kept, "lm": lm_figures,
                      "results": results, "machine": machine()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
