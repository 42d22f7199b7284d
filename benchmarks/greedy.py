"""Decoder-only speed of greedy transducer decoding: frame-looping vs label-looping vs WIND windows.

All decoders run side by side in one process on the same random encoder output and the same tiny model,
calibrated to emit about one label per 3 frames (a trained model's rate; `--frames-per-label`). Ratios are
against frame-looping; a last table gives each WIND window against label-looping. On a CPU, label-looping and
WIND W=8 are also timed with the tensor loop a GPU runs (`*_tensor_loop`, `GreedyConfig(host_loop=False)`)
beside the host loop CPUs run by default; on a GPU, with and without CUDA graphs.

    python benchmarks/greedy.py            # full table
    python benchmarks/greedy.py --quick    # under a minute on a 2-core CPU
    python benchmarks/greedy.py --device cuda --kind tdt

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._timing import interleaved_ms, machine  # noqa: E402
from decoders.transducer import (  # noqa: E402  # noqa: E402
    FrameLoopingGreedy,  # noqa: E402
    GreedyConfig,
    LabelLoopingGreedy,
    TinyTransducer,
    calibrate_blank_bias,
    emission_rate,
)

KINDS = {"rnnt": (), "tdt": (0, 1, 2, 3, 4)}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer frames, batch sizes and repeats")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--kind", default="rnnt", choices=sorted(KINDS))
    parser.add_argument("--frames", type=int, default=250, help="encoder frames per utterance (250 = 20 s)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--windows", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vocab-size", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=320, help="encoder, prediction and joint width")
    parser.add_argument("--frames-per-label", type=float, default=3.0,
                        help="emission rate the model is calibrated to (WIND gains more where labels are sparser)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: small per-step ops lose to thread overhead)")
    args = parser.parse_args()
    if args.quick:
        args.frames, args.batch_sizes, args.repeats = 120, [1, 16], 3
    return args


def time_interleaved(decoders: dict, encoder_output, lengths, repeats: int, device: str) -> dict[str, float]:
    """Best wall time in ms of each decoder over `repeats` interleaved rounds (the best of several runs is the
    figure least disturbed by load from other processes)."""
    runs = {name: (lambda d=decode: d(encoder_output, lengths)) for name, decode in decoders.items()}
    times, _ = interleaved_ms(runs, repeats, device)
    return {name: min(values) for name, values in times.items()}


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    model = TinyTransducer(vocab_size=args.vocab_size, encoder_dim=args.hidden, prediction_dim=args.hidden,
                           joint_dim=args.hidden, durations=KINDS[args.kind], seed=0)
    blank_bias = calibrate_blank_bias(model, frames_per_label=args.frames_per_label)
    rate = emission_rate(model, frames=256, seed=1)
    model = model.to(args.device)

    decoders = {"frame_looping": FrameLoopingGreedy(model, GreedyConfig(use_cuda_graphs=False)),
                "label_looping": LabelLoopingGreedy(model, GreedyConfig(use_cuda_graphs=False))}
    for window in args.windows:
        decoders[f"wind_w{window}"] = LabelLoopingGreedy(model, GreedyConfig(window_size=window, use_cuda_graphs=False))
    if args.device == "cuda":
        decoders["label_looping_graphs"] = LabelLoopingGreedy(model, GreedyConfig(use_cuda_graphs=True))
        decoders["wind_w8_graphs"] = LabelLoopingGreedy(model, GreedyConfig(window_size=8, use_cuda_graphs=True))
    else:
        decoders["label_looping_tensor_loop"] = LabelLoopingGreedy(model, GreedyConfig(host_loop=False))
        decoders["wind_w8_tensor_loop"] = LabelLoopingGreedy(model, GreedyConfig(window_size=8, host_loop=False))

    generator = torch.Generator().manual_seed(0)
    results: dict[str, dict[str, float]] = {}
    for batch_size in args.batch_sizes:
        encoder_output = torch.randn(batch_size, args.frames, args.hidden, generator=generator).to(args.device)
        # ragged lengths, as after length bucketing: between 80% and 100% of the longest
        lengths = torch.randint(int(args.frames * 0.8), args.frames + 1, (batch_size,), generator=generator)
        lengths[0] = args.frames
        lengths = lengths.to(args.device)
        reference = decoders["frame_looping"](encoder_output, lengths).to_list()
        for name, decode in decoders.items():  # also the warm-up run
            hypotheses = decode(encoder_output, lengths).to_list()
            if [h.tokens for h in hypotheses] != [h.tokens for h in reference]:
                raise SystemExit(f"{name} disagrees with frame_looping at batch size {batch_size}")
        results[str(batch_size)] = time_interleaved(decoders, encoder_output, lengths, args.repeats, args.device)

    names = list(decoders)
    print(f"greedy {args.kind} decoding, decoder only: {args.frames} frames, V={args.vocab_size}, "
          f"hidden={args.hidden}, {rate:.3f} labels/frame (blank bias {blank_bias:.2f}), device {args.device}, "
          f"{torch.get_num_threads()} threads")
    print(f"times in ms (best of {args.repeats} interleaved rounds); x = speed-up over frame_looping")
    header = f"{'B':>3} | " + " | ".join(f"{n:>22}" for n in names)
    print(header)
    print("-" * len(header))
    for batch_size, row in results.items():
        cells = [f"{row[n]:9.1f} ({row['frame_looping'] / row[n]:5.2f}x)" for n in names]
        print(f"{batch_size:>3} | " + " | ".join(f"{c:>22}" for c in cells))
    winds = [f"wind_w{window}" for window in args.windows]
    print("WIND over label-looping (label_looping ms / wind ms):")
    for batch_size, row in results.items():
        print(f"{batch_size:>3} | " + " | ".join(f"{n} {row['label_looping'] / row[n]:5.2f}x" for n in winds))
    command = "python benchmarks/greedy.py " + " ".join(sys.argv[1:])
    print(f"reproduce: {command.strip()}")
    summary = {
        "benchmark": "greedy",
        "command": command.strip(),
        "kind": args.kind,
        **machine(args.device),
        "frames": args.frames,
        "vocab_size": args.vocab_size,
        "hidden": args.hidden,
        "labels_per_frame": round(rate, 4),
        "ms": {b: {n: round(t, 3) for n, t in row.items()} for b, row in results.items()},
        "speedup_vs_frame_looping": {
            b: {n: round(row["frame_looping"] / t, 3) for n, t in row.items()} for b, row in results.items()
        },
        "wind_over_label_looping": {
            b: {n: round(row["label_looping"] / row[n], 3) for n in winds} for b, row in results.items()
        },
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
