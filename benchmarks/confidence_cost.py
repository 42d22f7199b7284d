"""Greedy decoding time with and without per-token confidence (NeMo's default measure), CPU, side by side.

    .venv/bin/python -m benchmarks.confidence_cost [--quick]

Tiny transducer (RNN-T and TDT, label looping) and CTC greedy, batch 1 and 32, at two sizes: `large` (joint
320, 1024 labels, 300 frames; --quick: 256 labels, 60 frames) and `demo`, the bundled
`models/demo_hybrid_rnnt_ctc.nemo` (encoder 144, prediction and joint 160, 256 labels) on 10 s utterances
(125 frames of 80 ms; CTC blank on 2 frames in 3). Confidence is NeMo's default measure (`default`:
exclude_blank) and the blank-including one (`blanks`: exclude_blank=False, mean). Prints a table of ratios
(time with confidence / without) and one JSON line at the end. Target: at most 1.05.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script or with -m
from benchmarks._timing import interleaved_ms, machine  # noqa: E402
from decoders.confidence import ConfidenceConfig  # noqa: E402
from decoders.ctc import CtcGreedy  # noqa: E402
from decoders.transducer import GreedyConfig, LabelLoopingGreedy, TinyTransducer, calibrate_blank_bias  # noqa: E402


def _transducer_runs(model, configs, encoder_output, lengths) -> dict:
    runs = {"plain": lambda: LabelLoopingGreedy(model, GreedyConfig())(encoder_output, lengths)}
    for name, config in configs.items():
        decoder = LabelLoopingGreedy(model, GreedyConfig(), confidence=config)
        runs[name] = lambda decoder=decoder: decoder(encoder_output, lengths)
    return runs


def _ctc_runs(configs, log_probs, lengths, blank_id) -> dict:
    runs = {"plain": lambda: CtcGreedy(blank_id)(log_probs, lengths)}
    for name, config in configs.items():
        runs[name] = lambda config=config: CtcGreedy(blank_id, confidence=config)(log_probs, lengths)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeats = 3 if args.quick else 10
    # size -> (encoder, prediction, joint, labels without blank, frames)
    sizes = {"large": (256, 320, 320, 256, 60) if args.quick else (256, 320, 320, 1024, 300),
             "demo": (144, 160, 160, 256, 125)}
    torch.manual_seed(0)
    configs = {"default": ConfidenceConfig(), "with_blanks": ConfidenceConfig(exclude_blank=False, aggregation="mean")}
    rows = []
    for size, (encoder_dim, prediction_dim, joint_dim, vocab, frames) in sizes.items():
        for kind, durations in (("rnnt", ()), ("tdt", (0, 1, 2, 3, 4))):
            model = TinyTransducer(vocab_size=vocab, encoder_dim=encoder_dim, prediction_dim=prediction_dim,
                                   joint_dim=joint_dim, durations=durations)
            calibrate_blank_bias(model, frames_per_label=3.0)
            for batch_size in (1, 32):
                encoder_output = torch.randn(batch_size, frames, encoder_dim)
                lengths = torch.full((batch_size,), frames)
                times, _ = interleaved_ms(_transducer_runs(model, configs, encoder_output, lengths), repeats)
                rows.append((kind, size, batch_size, times))
        # CTC frames: 4x the transducer's for `large` (random log-probs: a label on almost every frame, the
        # worst case); for `demo` the same 80 ms frames, blank the confident argmax on 2 frames in 3 (trained)
        ctc_frames = frames * 4 if size == "large" else frames
        for batch_size in (1, 32):
            logits = torch.randn(batch_size, ctc_frames, vocab + 1)
            if size == "demo":
                logits[..., vocab] += 10.0 * (torch.rand(batch_size, ctc_frames) < 2 / 3)
            log_probs = torch.log_softmax(logits, dim=-1)
            lengths = torch.full((batch_size,), ctc_frames)
            times, _ = interleaved_ms(_ctc_runs(configs, log_probs, lengths, vocab), repeats)
            rows.append(("ctc", size, batch_size, times))

    print(f"{'decoder':8} {'size':6} {'B':>3} {'plain ms':>9} {'default':>8} {'blanks':>8}")
    results = []
    for kind, size, batch_size, times in rows:
        median = {name: statistics.median(values) for name, values in times.items()}
        ratios = {name: median[name] / median["plain"] for name in configs}
        print(f"{kind:8} {size:6} {batch_size:>3} {median['plain']:9.1f} {ratios['default']:8.3f} "
              f"{ratios['with_blanks']:8.3f}")
        results.append(dict(decoder=kind, size=size, batch_size=batch_size, plain_ms=median["plain"], ratios=ratios))
    print("reproduce: .venv/bin/python -m benchmarks.confidence_cost" + (" --quick" if args.quick else ""))
    print(json.dumps({"benchmark": "confidence_cost", "quick": args.quick, "machine": machine(),
                      "results": results}))


if __name__ == "__main__":
    main()
