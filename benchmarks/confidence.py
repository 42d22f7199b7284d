"""How well word confidence tells right words from wrong ones, before and after calibration, and beside NeMo's.

The bundled model (`models/demo_hybrid_rnnt_ctc.nemo`) decodes the bundled domain sets (`samples/domain/`) with
greedy decoding of each head (`greedy`: the RNN-T; `ctc_greedy`: the CTC head) and each confidence measure of
NeMo 3.0 (`decoders/confidence.py`): max_prob and the Gibbs, Tsallis and Renyi entropies with `exp` and `lin`
normalisation, at alpha 0.33 (NeMo's default) and 1.0 (where all three entropies are Shannon's, so one row
stands for them: `shannon`). Tokens aggregate into words by `min` (NeMo's default). Each hypothesis word is
aligned to the reference by jiwer (`process_words`): a word in an `equal` chunk is right, one substituted or
inserted is wrong.

Figures, on test.json (100 utterances): AUC-ROC and AUC-PR of detecting wrong words (the score is 1 -
confidence; AUC-PR is average precision with the wrong words as positives), NCE (normalised cross entropy of
the confidence as P(right): above 0 is better than the constant share of right words) and ECE (expected
calibration error, 10 equal-width bins). Calibration maps (`pipeline/decoding/calibration.py`: isotonic regression and
Platt scaling) are fitted on dev.json (50 utterances) and evaluated on test. The `nemo` row is NeMo 3.0 itself
(`change_decoding_strategy` with `confidence_cfg`, `transcribe(return_hypotheses=True)`,
`hypothesis.word_confidence`) on the same model and waveforms with its default measure (tsallis, 0.33, exp,
min), its words aligned in the same way.

    python benchmarks/confidence.py            # both heads, every measure, NeMo's peer rows (about 2 minutes)
    python benchmarks/confidence.py --quick    # the transducer head, 3 measures, NeMo's peer row: under a minute
    python benchmarks/confidence.py --write-calibration calibration.json   # also write the default measure's
                                               # map (default kind), fitted on dev, for --confidence-calibration

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import numpy as np  # noqa: E402
import soundfile  # noqa: E402
import torch  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from benchmarks._timing import machine  # noqa: E402
from pipeline.config import BUNDLED_MODEL  # noqa: E402
from pipeline.decoding import (  # noqa: E402  # noqa: E402
    DEFAULT_KIND,
    KINDS,
    DecodingConfig,
    decode_in_process,
    fit_calibration,
    measure_of,
    plan_decoding,
    transcript_of,  # noqa: E402
)
from pipeline.io import file_sha256  # noqa: E402
from pipeline.lm import EncodedSet, encode_set  # noqa: E402
from pipeline.model import AsrModel, load_asr_model  # noqa: E402

ECE_BINS = 10
# (row name, DecodingConfig confidence settings); alpha 1.0: every entropy is Shannon's
MEASURES = [
    ("max_prob a=0.33", dict(confidence_method="max_prob", confidence_alpha=0.33)),
    ("max_prob a=1", dict(confidence_method="max_prob", confidence_alpha=1.0)),
    *[(f"{kind}-{norm} a=0.33", dict(entropy_type=kind, entropy_norm=norm, confidence_alpha=0.33))
      for kind in ("gibbs", "tsallis", "renyi") for norm in ("exp", "lin")],
    *[(f"shannon-{norm} a=1", dict(entropy_type="gibbs", entropy_norm=norm, confidence_alpha=1.0))
      for norm in ("exp", "lin")],
]
QUICK_MEASURES = ("max_prob a=1", "tsallis-exp a=0.33", "shannon-lin a=1")
DEFAULT_MEASURE = "tsallis-exp a=0.33"  # NeMo's and ours
# the decodings measured, by their table name; NeMo's peer rows for the greedy ones (it has no beam confidence)
HEADS = {"greedy": "transducer", "alsd": "transducer alsd", "ctc_greedy": "ctc", "ctc_beam": "ctc beam"}


# --- labels and metrics ------------------------------------------------------------------------------------
def word_labels(reference: str, words: Sequence[str]) -> np.ndarray:
    """Each hypothesis word: 1 right (in an `equal` chunk of jiwer's alignment), 0 wrong (substituted, inserted)."""
    import jiwer

    right = np.zeros(len(words), dtype=np.int64)
    if not words:
        return right
    if not reference.strip():
        return right  # every word is an insertion
    alignment = jiwer.process_words(reference, " ".join(words)).alignments[0]
    for chunk in alignment:
        if chunk.type == "equal":
            right[chunk.hyp_start_idx:chunk.hyp_end_idx] = 1
    return right


def auc_roc(wrong: np.ndarray, scores: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(wrong, scores))


def auc_pr(wrong: np.ndarray, scores: np.ndarray) -> float:
    from sklearn.metrics import average_precision_score

    return float(average_precision_score(wrong, scores))


def nce(confidence: np.ndarray, right: np.ndarray) -> float:
    """Normalised cross entropy: 1 - H(right | confidence) / H(right), in nats (Siu et al., 1997)."""
    c = np.clip(confidence, 1e-10, 1 - 1e-10)
    p = float(right.mean())
    if p in (0.0, 1.0):
        return float("nan")
    prior = -(p * np.log(p) + (1 - p) * np.log(1 - p))
    conditional = -np.mean(right * np.log(c) + (1 - right) * np.log(1 - c))
    return float((prior - conditional) / prior)


def ece(confidence: np.ndarray, right: np.ndarray, bins: int = ECE_BINS) -> float:
    """Expected calibration error: the word-weighted mean of |share right - mean confidence| over equal-width bins."""
    index = np.minimum((confidence * bins).astype(np.int64), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = index == b
        if inside.any():
            total += inside.sum() * abs(right[inside].mean() - confidence[inside].mean())
    return float(total / len(confidence))


def figures(confidence: np.ndarray, right: np.ndarray) -> dict[str, float]:
    wrong = 1 - right
    return {"auc_roc": auc_roc(wrong, 1 - confidence), "auc_pr": auc_pr(wrong, 1 - confidence),
            "nce": nce(confidence, right), "ece": ece(confidence, right)}


# --- our decoding ------------------------------------------------------------------------------------------
@dataclass
class Words:
    confidence: np.ndarray  # one per hypothesis word
    right: np.ndarray

    @classmethod
    def of(cls, references: Sequence[str], hypotheses: Sequence[tuple[list[str], list[float]]]) -> Words:
        confidence, right = [], []
        for reference, (words, values) in zip(references, hypotheses, strict=True):
            if len(words) != len(values):
                raise ValueError(f"{len(words)} words but {len(values)} confidences")
            confidence += values
            right.append(word_labels(reference, words))
        return cls(np.asarray(confidence, dtype=np.float64), np.concatenate(right))


def our_words(model: AsrModel, decoding: DecodingConfig, encoded: EncodedSet) -> Words:
    plan = plan_decoding(model.facts, decoding)
    decode = decode_in_process(model, plan)
    hypotheses: list[tuple[list[str], list[float]]] = [([], [])] * len(encoded.references)
    with torch.no_grad():
        for output, lengths, rows in encoded.batches:
            for row, h in zip(rows, decode(output, lengths)):
                transcript = transcript_of(model, plan.span_kind, h.tokens, h.frame_indices, h.durations, h.score,
                                           h.confidence, decoding.confidence_aggregation)
                hypotheses[row] = ([w.text for w in transcript.words], list(transcript.word_confidence or []))
    return Words.of(encoded.references, hypotheses)


# --- NeMo's ------------------------------------------------------------------------------------------------
def nemo_words(model: AsrModel, head: str, waveforms: Sequence[np.ndarray], references: Sequence[str]) -> Words:
    """NeMo 3.0's own word confidence (its default measure) of `waveforms` by one head of the same model."""
    from omegaconf import open_dict

    nemo = model.nemo_model
    hybrid = hasattr(nemo, "ctc_decoder")
    decoding = nemo.cfg.aux_ctc.decoding if hybrid and head == "ctc" else nemo.cfg.decoding
    with open_dict(decoding):
        decoding.strategy = "greedy_batch"
        decoding.confidence_cfg = dict(preserve_word_confidence=True, preserve_token_confidence=True,
                                       exclude_blank=True, aggregation="min",
                                       method_cfg=dict(name="entropy", entropy_type="tsallis", alpha=0.33,
                                                       entropy_norm="exp"))
    kwargs = dict(decoder_type="rnnt" if head == "transducer" else "ctc") if hybrid else {}
    nemo.change_decoding_strategy(decoding, verbose=False, **kwargs)
    # batch size 1: NeMo's padded batches change the features of the shorter utterances a little
    hypotheses = nemo.transcribe(list(waveforms), batch_size=1, return_hypotheses=True, num_workers=0,
                                 verbose=False)
    if isinstance(hypotheses, tuple):
        hypotheses = hypotheses[0]
    return Words.of(references, [(h.text.split(), [float(c) for c in h.word_confidence]) for h in hypotheses])


# --- the benchmark -----------------------------------------------------------------------------------------
def read_set(manifest: Path, model: AsrModel) -> tuple[EncodedSet, list[np.ndarray]]:
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    audio = [soundfile.read(manifest.parent / row["audio_filepath"], dtype="float32")[0] for row in rows]
    return encode_set(model, audio, [row["text"] for row in rows], 16, model.facts.sample_rate), audio


def evaluate(dev: Words, test: Words) -> dict:
    """Test figures of the raw confidence and of each calibration kind fitted on dev."""
    result = {"words": len(test.right), "right": float(test.right.mean()), "raw": figures(test.confidence, test.right)}
    for kind in KINDS:
        calibration = fit_calibration(dev.confidence, dev.right, kind)
        result[kind] = figures(calibration.apply(test.confidence), test.right)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the transducer head and 3 measures")
    parser.add_argument("--model", default=str(BUNDLED_MODEL))
    parser.add_argument("--domain", default=str(REPOSITORY / "samples" / "domain"))
    parser.add_argument("--no-nemo", action="store_true", help="leave out NeMo's peer rows")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--strategies", nargs="+", choices=list(HEADS),
                        help="the decodings measured (default: all; --quick: greedy)")
    parser.add_argument("--write-calibration", metavar="OUT.json",
                        help=f"write the {DEFAULT_KIND} map of the default measure ({DEFAULT_MEASURE}, min) of the "
                             f"first head, fitted on dev")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    model = load_asr_model(args.model)
    model_sha256 = file_sha256(Path(args.model))
    domain = Path(args.domain)
    (dev, dev_audio), (test, test_audio) = (read_set(domain / f"{name}.json", model) for name in ("dev", "test"))
    encode_s = time.perf_counter() - started

    measures = [m for m in MEASURES if m[0] in QUICK_MEASURES] if args.quick else MEASURES
    heads = args.strategies or (["greedy"] if args.quick else list(HEADS))
    results = []
    for strategy in heads:
        for name, settings in measures:
            decoding = DecodingConfig(strategy=strategy, confidence=True, **settings)
            dev_words, test_words = our_words(model, decoding, dev), our_words(model, decoding, test)
            results.append({"head": HEADS[strategy], "source": "ours", "measure": name} |
                           evaluate(dev_words, test_words))
            if args.write_calibration and name == DEFAULT_MEASURE and strategy == heads[0]:
                calibration = fit_calibration(dev_words.confidence, dev_words.right, DEFAULT_KIND, model_sha256,
                                              measure_of(plan_decoding(model.facts, decoding)))
                calibration.save(args.write_calibration)
                print(f"wrote the {DEFAULT_KIND} map of {calibration.measure!r} to {args.write_calibration}")
        if not args.no_nemo and strategy in ("greedy", "ctc_greedy"):
            head = HEADS[strategy]
            nemo_dev = nemo_words(model, head, dev_audio, dev.references)
            nemo_test = nemo_words(model, head, test_audio, test.references)
            results.append({"head": head, "source": "nemo", "measure": DEFAULT_MEASURE} | evaluate(nemo_dev, nemo_test))
        print(f"  {strategy} done ({time.perf_counter() - started:.0f} s)", flush=True)
    total_s = time.perf_counter() - started

    print(f"\nmodel {Path(args.model).name}; calibration fitted on dev ({len(dev.references)} utterances), figures "
          f"on test ({len(test.references)}); tokens -> words by min; ECE with {ECE_BINS} bins; encoding "
          f"{encode_s:.0f} s, total {total_s:.0f} s\n")
    print("| head | source | measure | words (right) | AUC-ROC | AUC-PR | NCE | ECE | isotonic: AUC-ROC, NCE, ECE "
          "| platt: AUC-ROC, NCE, ECE |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        raw = r["raw"]
        calibrated = [f"{r[k]['auc_roc']:.3f}, {r[k]['nce']:.3f}, {r[k]['ece']:.3f}" for k in KINDS]
        print(f"| {r['head']} | {r['source']} | {r['measure']} | {r['words']} ({r['right']:.1%}) | "
              f"{raw['auc_roc']:.3f} | {raw['auc_pr']:.3f} | {raw['nce']:.3f} | {raw['ece']:.3f} | "
              f"{calibrated[0]} | {calibrated[1]} |")
    targets = {}
    for head in dict.fromkeys(r["head"] for r in results):
        ours = next(r for r in results
                    if (r["head"], r["source"], r["measure"]) == (head, "ours", DEFAULT_MEASURE))
        nemo = next((r for r in results if (r["head"], r["source"]) == (head, "nemo")), None)
        targets[head] = {"auc_roc": ours["raw"]["auc_roc"], "ece_calibrated": ours[DEFAULT_KIND]["ece"],
                         "nemo_auc_roc": nemo["raw"]["auc_roc"] if nemo else None}
        versus = f" (NeMo's: {nemo['raw']['auc_roc']:.5f})" if nemo else ""
        print(f"\ntarget, {head}, default measure: AUC-ROC {ours['raw']['auc_roc']:.5f}{versus}; ECE after "
              f"{DEFAULT_KIND} calibration {ours[DEFAULT_KIND]['ece']:.3f} (target <= 0.05)", end="")
    print()
    command = "python benchmarks/confidence.py" + (" --quick" if args.quick else "")
    print(f"\nreproduce: {command}")
    print(json.dumps({"benchmark": "confidence", "quick": args.quick, "model": Path(args.model).name,
                      "dev_utterances": len(dev.references), "test_utterances": len(test.references),
                      "ece_bins": ECE_BINS, "total_s": total_s, "targets": targets, "results": results,
                      "machine": machine()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
