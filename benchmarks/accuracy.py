"""What a domain n-gram LM, a beam and blank collapse do to accuracy, on the bundled model and domain sets.

The bundled demo model (`models/demo_hybrid_rnnt_ctc.nemo`, trained on general English) decodes the bundled
domain sets (`samples/domain/`: banking and device commands, with contact names and phrasing that its training
text lacks). A token-level LM is built from `samples/domain/lm_text.txt` with `python jobs/build_lm.py`
(the model's own tokenizer, read from the `.nemo`); each strategy's LM weight is chosen on `dev.json`
(50 utterances), with CTC beam search's insertion bonus (token LMs favour short outputs), and reported on
`test.json` (100). "x greedy" is test WER relative to greedy decoding of the
same head without an LM (lower is better). The encoder runs once per set; "decode s" is one run of decoding
alone on the test set, to show what the LM costs here; speed comparisons belong to beam.py, ctc.py and ngram.py,
which interleave their runs. Also printed: the share of encoder frames that blank collapse (at the default
threshold, 0.9) leaves to the CTC beam search. Scoring is jiwer's WER and CER on the transcripts as decoded.

    python benchmarks/accuracy.py            # every strategy, LM weights 0.1-2.0 (and bonuses 0-6)
    python benchmarks/accuracy.py --quick    # four strategies, one LM setting: under a minute on a 2-core CPU

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import jiwer  # noqa: E402
import soundfile  # noqa: E402
import torch  # noqa: E402
from torch import Tensor  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from benchmarks._timing import machine  # noqa: E402
from decoders.ngram.lm import NgramLm  # noqa: E402
from jobs.build_lm import build_lm  # noqa: E402
from pipeline.config import BUNDLED_MODEL, BUNDLED_TDT_MODEL  # noqa: E402
from pipeline.decoding import (  # noqa: E402
    STRATEGIES,
    DecodingConfig,
    compact_ctc_log_probs,
    decode_in_process,
    plan_decoding,
    strategies_for,
)
from pipeline.nemo_model import AsrModel, load_asr_model  # noqa: E402
from pipeline.recognize import pad_waveforms  # noqa: E402

FULL_WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0)
QUICK_WEIGHTS = (0.6,)
FULL_BONUSES = (0.0, 1.0, 2.0, 3.0, 4.0, 6.0)  # ctc_beam's insertion bonus, per label, tried with every weight
QUICK_BONUSES = (2.0,)


@dataclass
class EncodedSet:
    """A manifest's references and its encoder output, in batches: ([B, T, D], [B] frames, row indices)."""

    references: list[str]
    batches: list[tuple[Tensor, Tensor, list[int]]]


def read_set(manifest: Path) -> tuple[list[str], list]:
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    audio = [soundfile.read(manifest.parent / row["audio_filepath"], dtype="float32")[0] for row in rows]
    return [row["text"] for row in rows], audio


@torch.no_grad()
def encode_set(model: AsrModel, manifest: Path, batch_size: int) -> EncodedSet:
    references, audio = read_set(manifest)
    order = sorted(range(len(audio)), key=lambda i: len(audio[i]), reverse=True)  # similar lengths share a batch
    batches = []
    for start in range(0, len(order), batch_size):
        rows = order[start: start + batch_size]
        waveforms, lengths = pad_waveforms([audio[i] for i in rows])
        encoder_output, encoder_lengths = model.encode(waveforms, lengths)
        batches.append((encoder_output, encoder_lengths, rows))
    return EncodedSet(references, batches)


Decode = Callable[[Tensor, Tensor], list[list[int]]]


def decoder_for(model: AsrModel, decoding: DecodingConfig, lm: NgramLm | None) -> Decode:
    """encoder_output [B, T, D], encoder_lengths [B] -> the token ids of the best hypothesis per utterance."""
    decode = decode_in_process(model, plan_decoding(model.facts, decoding), lm)
    return lambda output, lengths: [h.tokens for h in decode(output, lengths)]


def transcribe(model: AsrModel, decode: Decode, encoded: EncodedSet) -> list[str]:
    texts = [""] * len(encoded.references)
    with torch.no_grad():
        for output, lengths, rows in encoded.batches:
            for row, tokens in zip(rows, decode(output, lengths)):
                texts[row] = model.tokenizer.ids_to_text([int(t) for t in tokens])
    return texts


def frames_kept(model: AsrModel, encoded: EncodedSet, decoding: DecodingConfig) -> float:
    """The share of encoder frames that blank collapse leaves to a writer-stage search (CTC beam search)."""
    plan = plan_decoding(model.facts, decoding)
    kept = total = 0
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
        ("wind_beam", DecodingConfig(strategy="wind_beam", beam_size=beam_size), True, False),
        ("ctc_greedy", DecodingConfig(strategy="ctc_greedy"), True, True),
        ("ctc_beam", DecodingConfig(strategy="ctc_beam", beam_size=beam_size), True, True),
        ("ctc_beam, no collapse", DecodingConfig(strategy="ctc_beam", beam_size=beam_size,
                                                 ctc_collapse_threshold=None), True, False),
    ]
    rows = [(name, decoding, fuse) for name, decoding, fuse, in_quick in rows if in_quick or not quick]
    return [row for row in rows if row[1].strategy in strategies_for(model.facts)]


def takes_bonus(decoding: DecodingConfig) -> bool:
    return "ctc_insertion_bonus" in STRATEGIES[decoding.strategy].search_settings


def with_lm(decoding: DecodingConfig, lm_uri: str, weights: Sequence[float],
            bonuses: Sequence[float]) -> list[DecodingConfig]:
    """The LM settings tried on dev: every weight, and for ctc_beam every insertion bonus with it."""
    bonuses = bonuses if takes_bonus(decoding) else (decoding.ctc_insertion_bonus,)
    return [dataclasses.replace(decoding, lm_uri=lm_uri, lm_weight=w, ctc_insertion_bonus=b)
            for w in weights for b in bonuses]


def setting(decoding: DecodingConfig) -> str:
    bonus = f" bonus {decoding.ctc_insertion_bonus:g}" if takes_bonus(decoding) else ""
    return f"{decoding.lm_weight:g}{bonus}"


def score(references: Sequence[str], hypotheses: Sequence[str]) -> tuple[float, float]:
    return jiwer.wer(list(references), list(hypotheses)), jiwer.cer(list(references), list(hypotheses))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="greedy, alsd, ctc_greedy, ctc_beam; LM weight 0.6 (bonus 2) only")
    parser.add_argument("--model", default=str(BUNDLED_MODEL),
                        help=f"a hybrid .nemo, e.g. the TDT variant {BUNDLED_TDT_MODEL.relative_to(REPOSITORY)}")
    parser.add_argument("--domain", default=str(REPOSITORY / "samples" / "domain"),
                        help="folder with lm_text.txt, dev.json and test.json")
    parser.add_argument("--order", type=int, default=6, help="n-gram order of the domain LM (tokens)")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--weights", type=float, nargs="+", help="LM weights tried on dev (default: 0.1-2.0)")
    parser.add_argument("--bonuses", type=float, nargs="+",
                        help="ctc_beam insertion bonuses tried on dev (default: 0-6)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    weights = tuple(args.weights or (QUICK_WEIGHTS if args.quick else FULL_WEIGHTS))
    bonuses = tuple(args.bonuses or (QUICK_BONUSES if args.quick else FULL_BONUSES))
    domain = Path(args.domain)

    model = load_asr_model(args.model)
    started = time.perf_counter()
    dev, test = (encode_set(model, domain / f"{name}.json", args.batch_size) for name in ("dev", "test"))
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
            candidates = [decoding] + (with_lm(decoding, lm_path, weights, bonuses) if fuse else [])
            dev_wer = {setting(c): score(dev.references, transcribe(model, decoder_for(model, c, lm), dev))[0]
                       for c in candidates}
            best = min(candidates[1:], key=lambda c: (dev_wer[setting(c)], c.lm_weight, c.ctc_insertion_bonus),
                       default=None)
            chosen = [decoding] + ([best] if best is not None else [])
            for config in chosen:
                decode = decoder_for(model, config, lm)
                clock = time.perf_counter()
                hypotheses = transcribe(model, decode, test)
                seconds = time.perf_counter() - clock
                wer, cer = score(test.references, hypotheses)
                plan = plan_decoding(model.facts, config)
                head = plan.head
                if not plan.fuses_lm and not plan.strategy.beam and not plan.strategy.windowed:  # the greedy rows
                    greedy_wer[head] = wer
                results.append({"strategy": name, "head": head, "lm_weight": config.lm_weight,
                                "insertion_bonus": (config.ctc_insertion_bonus if takes_bonus(config)
                                                    else None),
                                "dev_wer": dev_wer[setting(config)], "test_wer": wer, "test_cer": cer,
                                "decode_s": seconds, "dev_wer_by_setting": dev_wer if config.lm_weight else None})
                print(f"  {name} lm_weight {setting(config)}: dev {dev_wer[setting(config)]:.1%}, "
                      f"test {wer:.1%} ({seconds:.1f} s)", flush=True)

    print(f"\nmodel {Path(args.model).name}; dev {len(dev.references)} / test {len(test.references)} utterances "
          f"(encoded in {encode_s:.1f} s); domain LM: order {report.order}, {sum(report.ngram_counts)} n-grams, "
          f"built in {build_s:.1f} s, perplexity {report.heldout_perplexity:.2f} per token on dev + test text")
    print(f"beam size {args.beam_size}; LM weights tried on dev: {', '.join(f'{w:g}' for w in weights)}; "
          f"ctc_beam insertion bonuses: {', '.join(f'{b:g}' for b in bonuses)}")
    threshold = DecodingConfig().ctc_collapse_threshold
    kept = frames_kept(model, test, DecodingConfig(strategy="ctc_beam"))
    print(f"blank collapse at {threshold} (ctc_beam rows) keeps {kept:.1%} of the test set's encoder frames\n")
    print("| strategy | head | LM weight (chosen on dev) | dev WER | test WER | test CER | x greedy "
          "| decode s (test) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        r["x_greedy"] = r["test_wer"] / greedy_wer[r["head"]] if greedy_wer.get(r["head"]) else None
        ratio = f"{r['x_greedy']:.2f}" if r["x_greedy"] is not None else "-"
        bonus = f", bonus {r['insertion_bonus']:g}" if r["insertion_bonus"] and r["lm_weight"] else ""
        print(f"| {r['strategy']} | {r['head']} | {r['lm_weight']:g}{bonus} | {r['dev_wer']:.1%} | {r['test_wer']:.1%} "
              f"| {r['test_cer']:.1%} | {ratio} | {r['decode_s']:.2f} |")
    lm_figures = {"order": report.order, "ngrams": sum(report.ngram_counts), "perplexity": report.heldout_perplexity}
    print(json.dumps({"benchmark": "accuracy", "quick": args.quick, "model": Path(args.model).name,
                      "dev_utterances": len(dev.references), "test_utterances": len(test.references),
                      "beam_size": args.beam_size, "collapse_frames_kept": kept, "lm": lm_figures,
                      "results": results, "machine": machine()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
