"""Greedy decoding time with and without per-token confidence (NeMo's default measure), CPU, side by side.

    .venv/bin/python -m benchmarks.confidence_cost [--quick]

Tiny transducer (RNN-T and TDT, label looping) and CTC greedy, batch 1 and 32; prints a table of ratios and
one JSON line at the end. Target: at most 1.05.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from benchmarks._timing import interleaved_ms
from decoders.confidence import ConfidenceConfig
from decoders.ctc import CtcGreedy
from decoders.tiny_transducer import TinyTransducer, calibrate_blank_bias
from decoders.transducer_greedy import GreedyConfig, LabelLoopingGreedy


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
    repeats, frames, vocab = (3, 60, 256) if args.quick else (10, 300, 1024)
    torch.manual_seed(0)
    configs = {"default": ConfidenceConfig(), "with_blanks": ConfidenceConfig(exclude_blank=False, aggregation="mean")}
    rows = []
    for kind, durations in (("rnnt", ()), ("tdt", (0, 1, 2, 3, 4))):
        model = TinyTransducer(vocab_size=vocab, encoder_dim=256, prediction_dim=320, joint_dim=320,
                               durations=durations)
        calibrate_blank_bias(model, frames_per_label=3.0)
        for batch_size in (1, 32):
            encoder_output = torch.randn(batch_size, frames, 256)
            lengths = torch.full((batch_size,), frames)
            times, _ = interleaved_ms(_transducer_runs(model, configs, encoder_output, lengths), repeats)
            rows.append((kind, batch_size, times))
    for batch_size in (1, 32):
        log_probs = torch.log_softmax(torch.randn(batch_size, frames * 4, vocab + 1), dim=-1)
        lengths = torch.full((batch_size,), frames * 4)
        times, _ = interleaved_ms(_ctc_runs(configs, log_probs, lengths, vocab), repeats)
        rows.append(("ctc", batch_size, times))

    print(f"{'decoder':8} {'B':>3} {'plain ms':>9} {'default':>8} {'blanks':>8}")
    results = []
    for kind, batch_size, times in rows:
        median = {name: statistics.median(values) for name, values in times.items()}
        ratios = {name: median[name] / median["plain"] for name in configs}
        print(f"{kind:8} {batch_size:>3} {median['plain']:9.1f} {ratios['default']:8.3f} {ratios['with_blanks']:8.3f}")
        results.append(dict(decoder=kind, batch_size=batch_size, plain_ms=median["plain"], ratios=ratios))
    print("reproduce: .venv/bin/python -m benchmarks.confidence_cost" + (" --quick" if args.quick else ""))
    print(json.dumps({"benchmark": "confidence_cost", "quick": args.quick, "results": results}))


if __name__ == "__main__":
    main()
