"""Word-level ARPA -> token LM: which conversion, measured on the bundled domain set.

A word-level LM (varikn, or KenLM's lmplz where it is on PATH; order `--word-order`) is estimated from 9 in 10
lines of `samples/domain/lm_text.txt`; the 10th lines are held out. It is converted to a token LM of order 6
for the bundled model's tokenizer by each candidate:

- sample: sentences drawn from the word LM (respecting its back-off weights: `sample_word_sentences`; as many
  as `pipeline/lm/word_arpa.py::sentences_to_draw` says, or `--sample-factor` per training line), and a token LM
  estimated from them by `jobs/build_lm.py` (what `--lm` does with a word-level ARPA);
- spell: every word n-gram spelled out in tokens, renormalised per token history
  (`decoders/ngram/word_lm.py::spell_word_lm`).

Both run as `--lm` runs them (`pipeline/lm/word_arpa.py::convert_word_arpa`).

For comparison, `text`: the token LM `jobs/build_lm.py` estimates from the same 9 in 10 lines (what the word
LM's owner would build if they had the text), and no LM; the word LM's own perplexity of the held-out lines,
per token, is the mark a conversion can reach. Each LM gets: conversion seconds, n-grams and binary
size, per-token perplexity of the held-out lines (`</s>` counted), and per strategy its LM weight tuned on
`samples/domain/dev.json` (`pipeline/lm/tuning.py::tune`, as `jobs/lm_bias.py` tunes) with the dev WER there,
and the WER on `samples/domain/test.json` at that weight (never tuned on).

    python benchmarks/word_lm.py            # greedy and alsd (beam 4); dev tuned, test scored
    python benchmarks/word_lm.py --quick    # greedy only, dev only: under a minute on a 2-core CPU

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

import torch  # noqa: E402

from benchmarks._timing import machine  # noqa: E402
from pipeline import schema  # noqa: E402
from pipeline.config import BUNDLED_MODEL  # noqa: E402
from pipeline.decoding import DecodingConfig  # noqa: E402

HELD_OUT_EVERY = 10
TOKEN_ORDER = 6


def build_word_arpa(text: Path, arpa: Path, order: int, work: Path) -> str:
    """A word-level ARPA from text, as its owner would have made it: lmplz if on PATH, else varikn; -> tool."""
    from pipeline.lm import find_lmplz, train_lmplz, train_varikn

    tokens = work / "words.txt"
    shutil.copyfile(text, tokens)
    if find_lmplz():
        train_lmplz(tokens, arpa, order, work)
        return "lmplz"
    train_varikn(tokens, arpa, order, work, scale=0.001)
    return "varikn"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="greedy only, dev only")
    parser.add_argument("--word-order", type=int, default=3, help="order of the word-level LM (default 3)")
    parser.add_argument("--sample-factor", type=float, default=None,
                        help="sampled sentences per training line (default: as --lm draws them)")
    parser.add_argument("--strategies", nargs="+", default=None, help="default: greedy alsd (greedy with --quick)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    strategies = tuple(args.strategies or (("greedy",) if args.quick else ("greedy", "alsd")))

    from decoders.ngram import UNK_ID, NgramLm, read_word_arpa
    from pipeline.io import load_audio, read_manifest
    from pipeline.lm import (
        TrialCache,
        build_lm,
        convert_word_arpa,
        encode_set,
        heldout_perplexity,
        model_speller,
        score,
        sentences_to_draw,
        transcribe_set,
        tune,
    )
    from pipeline.model import load_asr_model

    domain = REPOSITORY / "samples" / "domain"
    work = Path(tempfile.mkdtemp(prefix="lswlm", dir="/tmp"))
    try:
        lines = [line.strip() for line in (domain / "lm_text.txt").read_text(encoding="utf-8").splitlines()
                 if line.strip()]
        training = [line for i, line in enumerate(lines) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
        heldout = [line for i, line in enumerate(lines) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
        train_path = work / "train.txt"
        train_path.write_text("\n".join(training) + "\n", encoding="utf-8")
        speller = model_speller(str(BUNDLED_MODEL))
        vocab_size = speller.processor.get_piece_size()
        heldout_tokens = [speller.processor.encode(line) for line in heldout]

        clock = time.perf_counter()
        word_arpa = work / "words.arpa"
        word_tool = build_word_arpa(train_path, word_arpa, args.word_order, work)
        word_lm = read_word_arpa(word_arpa)
        word_s = time.perf_counter() - clock
        word_counts = [sum(len(key) == k for key in word_lm.ngrams) for k in range(1, word_lm.max_order + 1)]
        print(f"word LM ({word_tool}, order {word_lm.max_order}): {word_counts} n-grams, {len(word_lm.words)} "
              f"words, {word_s:.1f} s", flush=True)

        word_ids = {word: i for i, word in enumerate(word_lm.words)}
        word_log10 = sum(word_lm.log10_sentence([word_ids.get(w, UNK_ID) for w in line.split()])
                         for line in heldout)
        word_perplexity = 10.0 ** (-word_log10 / sum(len(tokens) + 1 for tokens in heldout_tokens))
        print(f"  the word LM itself: per-token perplexity {word_perplexity:.3f}", flush=True)
        lms: dict[str, NgramLm] = {}
        about: dict[str, dict] = {}

        def record(name: str, lm: NgramLm, seconds: float, note: str) -> None:
            path = work / f"{name}.lm"
            lm.save(path)
            lms[name] = NgramLm.load(path)
            perplexity, _ = heldout_perplexity(lms[name], heldout_tokens)
            about[name] = {"seconds": round(seconds, 2), "ngrams": sum(lm.ngram_counts),
                           "bytes": path.stat().st_size, "heldout_perplexity": round(perplexity, 3), "note": note}
            print(f"  {name}: {seconds:.1f} s, {about[name]['ngrams']} n-grams, perplexity {perplexity:.3f}",
                  flush=True)

        count = (round(args.sample_factor * len(training)) if args.sample_factor is not None
                 else sentences_to_draw(len(word_lm.ngrams)))
        for conversion, note in (("sample", f"{count} sentences drawn, token LM by jobs/build_lm.py"),
                                 ("spell", "word n-grams spelled out, renormalised")):
            clock = time.perf_counter()
            convert_word_arpa(word_arpa, speller, vocab_size, work / f"{conversion}.converted.lm", TOKEN_ORDER,
                              conversion=conversion, sentences=count, work_dir=work)
            record(conversion, NgramLm.load(work / f"{conversion}.converted.lm"), time.perf_counter() - clock, note)

        clock = time.perf_counter()
        build_lm([train_path], str(BUNDLED_MODEL), work / "text.lm", order=TOKEN_ORDER, work_dir=work)
        record("text", NgramLm.load(work / "text.lm"), time.perf_counter() - clock,
               "token LM from the word LM's training text (jobs/build_lm.py)")

        clock = time.perf_counter()
        model = load_asr_model(str(BUNDLED_MODEL))
        rate = model.facts.sample_rate

        def encoded(manifest: Path):
            rows = list(read_manifest(str(manifest)))
            waveforms = [load_audio(r[schema.AUDIO_FILEPATH], rate, r[schema.OFFSET], r[schema.DURATION] or None,
                                    channel=r[schema.CHANNEL]).samples for r in rows]
            return encode_set(model, waveforms, [r[schema.REFERENCE_TEXT] for r in rows], sample_rate=rate)

        dev = encoded(domain / "dev.json")
        test = None if args.quick else encoded(domain / "test.json")
        print(f"model load and encode: {time.perf_counter() - clock:.1f} s", flush=True)

        results: dict[str, dict[str, dict]] = {}
        for strategy in strategies:
            base = DecodingConfig(strategy=strategy, beam_size=4)
            results[strategy] = {}
            for name, lm in lms.items():
                def setting(weight: float, bonus: float | None, lm_path: str = str(work / f"{name}.lm"),
                            base: DecodingConfig = base) -> DecodingConfig:
                    return dataclasses.replace(base, lm_uri=lm_path if weight else None, lm_weight=weight)

                def evaluate(weight: float, bonus: float | None, lm: NgramLm = lm, setting=setting):
                    return score(dev.references, transcribe_set(model, setting(weight, bonus), lm, dev))

                clock = time.perf_counter()
                tuned = tune(base, evaluate, TrialCache({"lm": name, "strategy": strategy}))
                best = min((t for t in tuned.trials if t.lm_weight > 0), key=lambda t: (t.wer, t.cer, t.lm_weight))
                row = {"weight": best.lm_weight, "dev_wer": best.wer, "baseline_dev_wer": tuned.baseline.wer,
                       "beats_baseline": tuned.lm_helps, "tuning_s": round(time.perf_counter() - clock, 2)}
                if test is not None:
                    row["test_wer"] = score(test.references, transcribe_set(
                        model, setting(best.lm_weight, None), lm, test)).wer
                    row["baseline_test_wer"] = score(test.references, transcribe_set(
                        model, setting(0.0, None), lm, test)).wer
                results[strategy][name] = row
                print(f"  {strategy} {name}: weight {best.lm_weight:g}, dev WER {best.wer:.2%} (no LM "
                      f"{tuned.baseline.wer:.2%})" + (f", test WER {row['test_wer']:.2%}" if test else ""),
                      flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    command = " ".join(["python benchmarks/word_lm.py", *sys.argv[1:]])
    print(f"\n# {command}: word LM {word_tool} order {word_lm.max_order} ({sum(word_counts)} n-grams) from "
          f"{len(training)} lines; {len(heldout)} held-out lines ({sum(map(len, heldout_tokens))} tokens); token "
          f"order {TOKEN_ORDER}; dev {len(dev.references)} utterances" + (
              f", test {len(test.references)}" if test is not None else "") + f"; {args.threads} torch threads")
    header = "| LM | convert s | n-grams | MB | held-out ppl | ppl / text |"
    columns = ""
    for strategy in strategies:
        header += f" {strategy} weight | {strategy} dev WER |" + (f" {strategy} test WER |" if test else "")
        columns += " --- | --- |" + (" --- |" if test else "")
    print(header)
    print("| --- | --- | --- | --- | --- | --- |" + columns)
    reference = about["text"]["heldout_perplexity"]
    print(f"| word LM itself | | {sum(word_counts)} | | {word_perplexity:.3f} | {word_perplexity / reference:.3f} |"
          + " |" * (len(strategies) * (3 if test else 2)))
    for name in lms:
        line = (f"| {name} | {about[name]['seconds']:.1f} | {about[name]['ngrams']} | "
                f"{about[name]['bytes'] / 1e6:.2f} | {about[name]['heldout_perplexity']:.3f} | "
                f"{about[name]['heldout_perplexity'] / reference:.3f} |")
        for strategy in strategies:
            row = results[strategy][name]
            line += f" {row['weight']:g} | {row['dev_wer']:.2%} |" + (f" {row['test_wer']:.2%} |" if test else "")
        print(line)
    line = "| no LM | | | | | |"
    for strategy in strategies:
        row = results[strategy]["text"]
        line += f" 0 | {row['baseline_dev_wer']:.2%} |" + (f" {row['baseline_test_wer']:.2%} |" if test else "")
    print(line)
    print(json.dumps({"benchmark": "word_lm", "command": command, "quick": args.quick,
                      "word_lm": {"tool": word_tool, "order": word_lm.max_order, "ngrams": word_counts,
                                  "words": len(word_lm.words), "seconds": round(word_s, 2)},
                      "training_lines": len(training), "heldout_lines": len(heldout), "token_order": TOKEN_ORDER,
                      "sampled_sentences": count, "word_lm_heldout_perplexity": round(word_perplexity, 3),
                      "lms": about, "wer": results, **machine("cpu")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
