"""What phrase boosting (`--phrases`) does to accuracy and what it costs, on the bundled model and domain sets.

The bundled demo model (`models/demo_hybrid_rnnt_ctc.nemo`, general English) decodes the bundled domain sets
(`samples/domain/`: banking and device commands addressed to contacts). The phrase list is the domain's contact
book: every "first last" name that the domain's command templates address ("call X", "pay X ...", "to X on
monday", "from X for dinner", "share my location with X", ...), read from `lm_text.txt`, `dev.json` and
`test.json` (no name is made up; `contact_names` shows the templates). Key phrases are those names: in each
utterance, a name of the list counts once per occurrence in the reference and in the transcript; recall = found /
in the references, precision = found / in the transcripts, F = their harmonic mean. WER is jiwer's.

Accuracy: per strategy, decoding without boosting, and with boosting at the weight chosen on dev (lowest dev
WER, then the higher key-phrase F, then the smaller weight) from `--weights`; dev and test figures.

Cost: decode time of the test set (encoder output computed once, not timed) with 100, 1,000 and 20,000
phrases over plain decoding of the same strategy, runs interleaved (`benchmarks/_timing.py`); lists past the
contact book are filled with other first-last pairs of the book's names (unheard pairs, as a larger
contact book would hold). Building the tree (tokenizing and compiling the list) is timed separately: an actor
does it once.

    python benchmarks/boosting.py            # every transducer and CTC strategy, weights 0.25-2
    python benchmarks/boosting.py --quick    # greedy, alsd, ctc_greedy, ctc_beam; weight 0.5; 100 and 1,000
                                             # phrases, one timed round: about a minute on a 2-core CPU

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import soundfile  # noqa: E402
import torch  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from benchmarks._timing import interleaved_ms, machine  # noqa: E402
from decoders.boosting import PhraseBoosting  # noqa: E402
from pipeline.config import BUNDLED_MODEL  # noqa: E402
from pipeline.decoding import (  # noqa: E402  # noqa: E402
    DecodingConfig,
    boosting_from_phrase_file,
    decode_in_process,
    plan_decoding,
    sentencepiece_of,
    strategies_for,
)
from pipeline.lm import EncodedSet, encode_set, score  # noqa: E402
from pipeline.model import load_asr_model  # noqa: E402

FULL_WEIGHTS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
QUICK_WEIGHTS = (0.5,)
FULL_SIZES = (100, 1000, 20000)
QUICK_SIZES = (100, 1000)

_NAME = r"([a-z']+ [a-z']+)"
CONTACT_TEMPLATES = tuple(re.compile(p) for p in (
    rf"\bto {_NAME} (?:on \w+day\b|from my|saying|last)", rf"\bto {_NAME}$", rf"^call {_NAME}(?: on the mobile)?$",
    rf"remind me to call {_NAME} at", rf"^pay (?!my ){_NAME} \w+", rf"from {_NAME} for dinner", rf"with {_NAME}$"))


def contact_names(texts: Sequence[str]) -> list[str]:
    """The names the domain's command templates address, most frequent first."""
    found = Counter(m.group(1) for text in texts for p in CONTACT_TEMPLATES for m in p.finditer(text))
    return [name for name, _ in found.most_common()]


def padded_list(names: list[str], size: int, seed: int = 0) -> list[str]:
    """`size` phrases: the contact book, then other first-last pairs of its names (shuffled, no repeats)."""
    if size <= len(names):
        return names[:size]
    firsts, lasts = sorted({n.split()[0] for n in names}), sorted({n.split()[-1] for n in names})
    known = set(names)
    pairs = [f"{f} {last}" for f in firsts for last in lasts if f"{f} {last}" not in known]
    random.Random(seed).shuffle(pairs)
    if len(names) + len(pairs) < size:
        raise SystemExit(f"only {len(names) + len(pairs)} distinct names can be made from the contact book")
    return names + pairs[: size - len(names)]


def key_phrase_counts(references: Sequence[str], hypotheses: Sequence[str], phrases: Sequence[str]) -> tuple[int, ...]:
    """(found, in references, in transcripts) over the set: occurrences of the phrases as whole words."""
    patterns = [re.compile(rf"(?<![\w']){re.escape(p)}(?![\w'])") for p in phrases]
    found = in_references = in_hypotheses = 0
    for reference, hypothesis in zip(references, hypotheses):
        for pattern in patterns:
            r, h = len(pattern.findall(reference)), len(pattern.findall(hypothesis))
            found, in_references, in_hypotheses = found + min(r, h), in_references + r, in_hypotheses + h
    return found, in_references, in_hypotheses


def key_phrase_scores(counts: tuple[int, ...]) -> dict[str, float]:
    found, in_references, in_hypotheses = counts
    recall = found / in_references if in_references else 0.0
    precision = found / in_hypotheses if in_hypotheses else 1.0
    f_score = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    return {"recall": recall, "precision": precision, "f": f_score}


def read_set(manifest: Path, batch_size: int, model) -> EncodedSet:
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    audio = [soundfile.read(manifest.parent / row["audio_filepath"], dtype="float32")[0] for row in rows]
    return encode_set(model, audio, [row["text"] for row in rows], batch_size, model.facts.sample_rate)


class Decodes:
    """Texts of a set decoded with a config and a boosting tree (None: none), each decoded once."""

    def __init__(self, model, sets: dict[str, EncodedSet]) -> None:
        self.model, self.sets = model, sets
        self.texts: dict[tuple, list[str]] = {}

    def decoder(self, decoding: DecodingConfig, boosting):
        plan = plan_decoding(self.model.facts, decoding)
        return decode_in_process(self.model, plan, plan.fusion_model(None, boosting))

    def run(self, decode, name: str) -> list[str]:
        encoded = self.sets[name]
        texts = [""] * len(encoded.references)
        with torch.no_grad():
            for output, lengths, rows in encoded.batches:
                for row, hypothesis in zip(rows, decode(output, lengths)):
                    texts[row] = self.model.tokenizer.ids_to_text([int(t) for t in hypothesis.tokens])
        return texts

    def get(self, name: str, decoding: DecodingConfig, boosting, key) -> list[str]:
        if (name, key) not in self.texts:
            self.texts[(name, key)] = self.run(self.decoder(decoding, boosting), name)
        return self.texts[(name, key)]


def advance_share(decodes: Decodes, decoding: DecodingConfig, tree: PhraseBoosting) -> tuple[float, float]:
    """(seconds in the tree's `advance`, seconds of the whole decode) of one fused decode of the test set."""
    spent = [0.0]
    advance = tree.advance

    def timed(states):
        started = time.perf_counter()
        result = advance(states)
        spent[0] += time.perf_counter() - started
        return result

    tree.advance = timed  # the decoder holds this very object (already on its device)
    try:
        decode = decodes.decoder(decoding, tree)
        started = time.perf_counter()
        decodes.run(decode, "test")
        return spent[0], time.perf_counter() - started
    finally:
        del tree.advance


def strategies(quick: bool, beam_size: int, facts) -> list[DecodingConfig]:
    names = ("greedy", "alsd", "ctc_greedy", "ctc_beam") if quick else (
        "greedy", "wind_greedy", "alsd", "aes", "aes_skip", "wind_beam", "ctc_greedy", "ctc_beam")
    return [DecodingConfig(strategy=s, beam_size=beam_size) for s in names if s in strategies_for(facts)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="four strategies, one weight, 100 and 1,000 phrases")
    parser.add_argument("--model", default=str(BUNDLED_MODEL))
    parser.add_argument("--domain", default=str(REPOSITORY / "samples" / "domain"),
                        help="folder with lm_text.txt, dev.json and test.json")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--weights", type=float, nargs="+", help="boost weights tried on dev")
    parser.add_argument("--sizes", type=int, nargs="+", help="phrase-list sizes of the cost table")
    parser.add_argument("--repeats", type=int, help="timed rounds of the cost table (default: 3, --quick 1)")
    parser.add_argument("--cost-only", action="store_true", help="only the cost table")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    weights = tuple(args.weights or (QUICK_WEIGHTS if args.quick else FULL_WEIGHTS))
    sizes = tuple(args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES))
    repeats = args.repeats or (1 if args.quick else 3)
    domain = Path(args.domain)

    model = load_asr_model(args.model)
    sets, encode_s = {}, {}
    for name in ("dev", "test"):
        started = time.perf_counter()
        sets[name] = read_set(domain / f"{name}.json", args.batch_size, model)
        encode_s[name] = time.perf_counter() - started
    texts = (domain / "lm_text.txt").read_text().splitlines() + sets["dev"].references + sets["test"].references
    contacts = contact_names(texts)
    processor = sentencepiece_of(model)
    vocab_size = model.transducer.vocab_size if model.transducer else model.ctc.vocab_size

    with tempfile.TemporaryDirectory() as scratch:
        def tree(phrases: list[str]):
            path = Path(scratch) / f"phrases_{len(phrases)}.txt"
            path.write_text("\n".join(phrases) + "\n")
            clock = time.perf_counter()
            built = boosting_from_phrase_file(str(path), processor, vocab_size)
            return built, time.perf_counter() - clock

        book, book_s = tree(contacts)
        decodes = Decodes(model, sets)
        results = []
        for decoding in strategies(args.quick, args.beam_size, model.facts) if not args.cost_only else ():
            name = decoding.strategy

            def measured(set_name: str, weight: float, decoding=decoding, name=name) -> dict:
                config = dataclasses.replace(decoding, phrases_uri="contacts" if weight else None,
                                             boost_weight=weight or 1.0)
                hypotheses = decodes.get(set_name, config, book if weight else None, (name, weight))
                encoded = sets[set_name]
                return {"wer": score(encoded.references, hypotheses).wer,
                        **key_phrase_scores(key_phrase_counts(encoded.references, hypotheses, contacts))}

            def order(weight: float) -> tuple:
                dev = measured("dev", weight)
                return dev["wer"], -dev["f"], weight

            best = min(weights, key=order)
            for weight in (0.0, best):
                row = {"strategy": name, "boost_weight": weight, "dev": measured("dev", weight),
                       "test": measured("test", weight),
                       "dev_wer_by_weight": {f"{w:g}": measured("dev", w)["wer"] for w in weights} if weight else None}
                results.append(row)
                print(f"  {name} boost {weight:g}: dev WER {row['dev']['wer']:.1%} F {row['dev']['f']:.2f}; "
                      f"test WER {row['test']['wer']:.1%} F {row['test']['f']:.2f}", flush=True)

        # cost: decode time with N phrases over plain decoding, the same strategies, interleaved
        trees = {size: tree(padded_list(contacts, size)) for size in sizes}
        # the decoders' fusion path alone: a tree that matches nothing (every label scores 0 at its root)
        empty = PhraseBoosting.from_token_sequences([], vocab_size)
        costs = []
        for decoding in strategies(args.quick, args.beam_size, model.facts):
            boosted = dataclasses.replace(decoding, phrases_uri="list", boost_weight=1.0)
            runs = {"plain": decodes.decoder(decoding, None), "fusion": decodes.decoder(boosted, empty)}
            for size, (built, _) in trees.items():
                runs[str(size)] = decodes.decoder(boosted, built)
            timed, _ = interleaved_ms({k: (lambda d=d: decodes.run(d, "test")) for k, d in runs.items()},
                                      repeats)
            plain = min(timed["plain"])
            # beside the decoder alone: the extra time as a share of reading + encoding + decoding the test set
            whole = encode_s["test"] * 1000 + plain
            # the tree's own share, timed inside one fused decode (robust to a loaded machine, unlike differences)
            middle = sizes[len(sizes) // 2]
            tree_s, decode_s = advance_share(decodes, boosted, trees[middle][0])
            row = {"strategy": decoding.strategy, "plain_ms": plain, "fusion_path": min(timed["fusion"]) / plain,
                   "tree_share": {"phrases": middle, "advance_s": tree_s, "decode_s": decode_s},
                   "ratio": {str(size): min(timed[str(size)]) / plain for size in sizes},
                   "share_of_whole": {str(size): (min(timed[str(size)]) - plain) / whole for size in sizes}}
            costs.append(row)
            print(f"  {decoding.strategy}: plain {plain:.0f} ms; no phrases x{row['fusion_path']:.3f}; " + ", ".join(
                f"{size} phrases x{row['ratio'][str(size)]:.3f}" for size in sizes)
                + f"; tree advance {tree_s / decode_s:.1%} of a fused decode ({middle} phrases)", flush=True)

    test_audio_s = sets["test"].audio_s
    print(f"\nmodel {Path(args.model).name}; dev {len(sets['dev'].references)} / test {len(sets['test'].references)} "
          f"utterances ({test_audio_s:.0f} s of test audio, read and encoded once in {encode_s['test']:.1f} s); "
          f"contact book: "
          f"{len(contacts)} names, {book.num_states} tree states, built in {book_s * 1000:.0f} ms; beam size "
          f"{args.beam_size}; boost weights tried on dev: {', '.join(f'{w:g}' for w in weights)}\n")
    print("| strategy | boost weight (dev's pick) | dev WER | test WER | test key-phrase recall | precision | F |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        t = r["test"]
        print(f"| {r['strategy']} | {r['boost_weight']:g} | {r['dev']['wer']:.1%} | {t['wer']:.1%} | "
              f"{t['recall']:.2f} | {t['precision']:.2f} | {t['f']:.2f} |")
    middle = sizes[len(sizes) // 2]
    print("\n| strategy | plain decode, test set (ms) | x plain, fusion path, no phrase | "
          + " | ".join(f"x plain, {s} phrases" for s in sizes) + " | "
          + " | ".join(f"extra / (encode + decode), {s}" for s in sizes)
          + f" | tree advance / fused decode, {middle} |")
    print("|---|---|---|" + "---|" * (2 * len(sizes) + 1))
    for c in costs:
        share = c["tree_share"]["advance_s"] / c["tree_share"]["decode_s"]
        print(f"| {c['strategy']} | {c['plain_ms']:.0f} | {c['fusion_path']:.3f} | "
              + " | ".join(f"{c['ratio'][str(s)]:.3f}" for s in sizes) + " | "
              + " | ".join(f"{c['share_of_whole'][str(s)]:+.1%}" for s in sizes) + f" | {share:.1%} |")
    print("\nbuilding the tree (read, tokenize, compile; once per actor): " + ", ".join(
        f"{size} phrases {seconds * 1000:.0f} ms ({built.num_states} states)"
        for size, (built, seconds) in trees.items()))
    print(json.dumps({"benchmark": "boosting", "quick": args.quick, "model": Path(args.model).name,
                      "contacts": len(contacts), "weights": weights, "beam_size": args.beam_size,
                      "encode_s": encode_s, "repeats": repeats,
                      "accuracy": results, "cost": costs,
                      "build_s": {str(s): b for s, (_, b) in trees.items()},
                      "tree_states": {str(s): t.num_states for s, (t, _) in trees.items()},
                      "machine": machine()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
