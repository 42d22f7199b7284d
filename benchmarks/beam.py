"""Decoder-only speed of batched transducer beam search: ALSD++, AES++ and AES++ with blank-frame skipping at
several beams, against label-looping greedy and against the per-utterance reference beam search
(tests/reference/). WIND beam search is measured by benchmarks/wind_beam.py on the bundled model: on these
random models, whose blank is never confident, its window makes a label on the current frame outscore blank
over the window, so it emits `max_symbols` labels on every frame and says nothing about a trained model.

Everything runs side by side in one process on the same random encoder output and the same tiny RNN-T,
calibrated to emit about one label per 3 frames (a trained model's rate). The per-utterance reference is
timed on the first `--reference-utterances` utterances of each batch and scaled to the whole batch (it is
a loop over utterances, so its time is linear in their number); its best hypotheses are checked to be the
batched ones.

    python benchmarks/beam.py            # full table
    python benchmarks/beam.py --quick    # under a minute on a 2-core CPU
    python benchmarks/beam.py --nemo     # ours vs NeMo's malsd_batch / maes_batch (needs nemo_toolkit)
    python benchmarks/beam.py --device cuda [--no-cuda-graphs]   # beam and greedy with (or without) CUDA graphs

With `--nemo` the model is a random NeMo FastConformer (tests/support/random_nemo.py) with its blank bias
bisected to about one label per 3 frames, and our ALSD++ / AES++ (through `pipeline.models.NemoTransducer`)
are timed against NeMo 3.0's batched computers on the same encoder output, results as host lists on both
sides. ALSD++'s best hypotheses must equal malsd_batch's; for AES++ the table counts the utterances whose best
tokens equal maes_batch's (equal at beams 1-4 in tests; NeMo tracks "may expand again" per beam slot, not per
hypothesis, which we suspect explains the rare differences at beam 8).

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._timing import interleaved_ms, machine  # noqa: E402
from decoders.transducer import (  # noqa: E402  # noqa: E402  # noqa: E402
    AesBeamSearch,
    AesSkipBlankSearch,  # noqa: E402
    AlsdBeamSearch,
    BeamSearchConfig,
    GreedyConfig,
    LabelLoopingGreedy,
    TinyTransducer,
    calibrate_blank_bias,
    emission_rate,
)
from tests.reference.transducer_beam import alsd_decode, maes_decode  # noqa: E402

# AES++ with blank-frame skipping gives AES++'s results (tests/decoders/transducer/test_beam.py), so its reference
# is mAES's
KINDS = {"rnnt": (), "tdt": (0, 1, 2, 3, 4)}
SEARCHES = {
    "alsd": (AlsdBeamSearch, alsd_decode),
    "aes": (AesBeamSearch, maes_decode),
    "aes_skip": (AesSkipBlankSearch, maes_decode),
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick", action="store_true", help="30 frames, width and vocabulary 128, one repeat, one reference utterance"
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--kind", default="rnnt", choices=sorted(KINDS),
                        help="tdt: durations 0-4, without the RNN-T-only aes_skip")
    parser.add_argument("--frames", type=int, default=250, help="encoder frames per utterance (250 = 20 s)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--beams", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--reference-utterances",
        type=int,
        default=2,
        help="utterances per batch the per-utterance reference decodes (time scaled to the batch)",
    )
    parser.add_argument("--vocab-size", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=320, help="encoder, prediction and joint width")
    parser.add_argument("--window", type=int, default=8, help="WIND window W (aes_skip)")
    parser.add_argument(
        "--blank-bias",
        type=float,
        default=None,
        help="set the blank bias instead of calibrating to one label per 3 frames "
        "(higher: more confident blanks, as a trained model)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--no-cuda-graphs",
        action="store_true",
        help="on a GPU, run beam search and greedy eagerly (default: both replay CUDA graphs)",
    )
    parser.add_argument("--nemo", action="store_true", help="compare with NeMo's malsd_batch / maes_batch")
    args = parser.parse_args()
    if args.quick:
        args.frames, args.repeats, args.reference_utterances = 30, 1, 1
        args.hidden, args.vocab_size = 128, 128
    return args


def timed(decode, repeats: int, device: str):
    """(median wall time in ms over `repeats` runs after one warm-up run, the result)."""
    times, outputs = interleaved_ms({"run": decode}, repeats, device)
    return statistics.median(times["run"]), outputs["run"]


def random_nemo_transducer(kind: str, frames_per_label: float = 3.0):
    """A random NeMo RNN-T or TDT model, its `NemoTransducer`, and the blank bias giving that emission rate."""
    from pipeline.model import NemoTransducer
    from tests.support.random_nemo import build_random_model, set_blank_bias, train_tokenizer

    nemo_kind = "rnnt" if kind == "rnnt" else "tdt_ctc"
    model = build_random_model(nemo_kind, train_tokenizer(Path(tempfile.mkdtemp(prefix="beam_bench_")) / "tok"), seed=3)
    durations = list(model.cfg.model_defaults.get("tdt_durations", []) or []) if kind != "rnnt" else []
    transducer = NemoTransducer(model.decoder, model.joint, durations)
    generator = torch.Generator().manual_seed(1)
    encoder_output = torch.randn(8, 64, model.cfg.encoder.d_model, generator=generator)
    lengths = torch.full((8,), 64)
    low, high = -2.0, 4.0
    for _ in range(12):  # emission falls as the blank bias rises
        middle = (low + high) / 2
        set_blank_bias(model, "transducer", middle)
        with torch.no_grad():
            rate = float(LabelLoopingGreedy(transducer)(encoder_output, lengths).token_lengths.sum()) / (8 * 64)
        low, high = (middle, high) if rate > 1.0 / frames_per_label else (low, middle)
    set_blank_bias(model, "transducer", (low + high) / 2)
    return model, transducer, (low + high) / 2


def main_nemo(args: argparse.Namespace) -> None:
    from nemo.collections.asr.parts.submodules.rnnt_maes_batched_computer import ModifiedAESBatchedRNNTComputer
    from nemo.collections.asr.parts.submodules.rnnt_malsd_batched_computer import ModifiedALSDBatchedRNNTComputer
    from nemo.collections.asr.parts.submodules.tdt_malsd_batched_computer import ModifiedALSDBatchedTDTComputer

    model, transducer, blank_bias = random_nemo_transducer(args.kind)
    generator = torch.Generator().manual_seed(0)
    rows = []
    for batch_size in args.batch_sizes:
        encoder_output = torch.randn(batch_size, args.frames, model.cfg.encoder.d_model, generator=generator)
        lengths = torch.randint(int(args.frames * 0.8), args.frames + 1, (batch_size,), generator=generator)
        lengths[0] = args.frames
        for beam_size in args.beams:
            config = BeamSearchConfig(beam_size=beam_size)
            pairs = {}
            if transducer.durations:
                pairs["alsd"] = (
                    AlsdBeamSearch(transducer, config),
                    ModifiedALSDBatchedTDTComputer(
                        model.decoder,
                        model.joint,
                        durations=list(transducer.durations),
                        blank_index=transducer.blank_id,
                        beam_size=beam_size,
                        max_symbols_per_step=10,
                        allow_cuda_graphs=False,
                    ),
                )
            else:
                pairs["alsd"] = (
                    AlsdBeamSearch(transducer, config),
                    ModifiedALSDBatchedRNNTComputer(
                        model.decoder,
                        model.joint,
                        transducer.blank_id,
                        beam_size,
                        max_symbols_per_step=10,
                        allow_cuda_graphs=False,
                    ),
                )
                pairs["aes"] = (
                    AesBeamSearch(transducer, config),
                    ModifiedAESBatchedRNNTComputer(
                        model.decoder,
                        model.joint,
                        transducer.blank_id,
                        beam_size,
                        maes_num_steps=2,
                        maes_expansion_beta=2,
                        maes_expansion_gamma=2.3,
                        allow_cuda_graphs=False,
                    ),
                )
            for name, (ours, theirs) in pairs.items():

                def run_ours(d=ours, x=encoder_output, n=lengths):
                    return [h.tokens for h in d(x, n).to_list()]

                def run_theirs(c=theirs, x=encoder_output, n=lengths):
                    return [h.y_sequence.tolist() for h in c(x, n)[0].to_hyps_list(score_norm=True)]

                with torch.no_grad():  # interleaved rounds: load on the machine falls on both alike
                    times, outputs = interleaved_ms({"ours": run_ours, "nemo": run_theirs}, args.repeats)
                ours_ms, nemo_ms = statistics.median(times["ours"]), statistics.median(times["nemo"])
                our_tokens, nemo_tokens = outputs["ours"], outputs["nemo"]
                same = sum(a == b for a, b in zip(our_tokens, nemo_tokens))
                if name == "alsd" and same != batch_size:  # equal by test; AES++ may differ (see the docstring)
                    raise SystemExit(f"{name} beam {beam_size} disagrees with NeMo at batch {batch_size}")
                rows.append(
                    {
                        "batch_size": batch_size,
                        "search": name,
                        "beam_size": beam_size,
                        "ms": round(ours_ms, 2),
                        "nemo_ms": round(nemo_ms, 2),
                        "speedup_vs_nemo": round(nemo_ms / ours_ms, 2),
                        "same_best": same,
                    }
                )
    print(
        f"transducer beam search ({args.kind}) vs NeMo 3.0 on a random NeMo FastConformer's joint and prediction "
        f"network, decoder only (encoder output -> host token lists): {args.frames} frames, "
        f"V={transducer.vocab_size}, blank bias {blank_bias:.2f}, {torch.get_num_threads()} threads; "
        f"median of {args.repeats}; x = NeMo time / ours"
    )
    header = f"{'B':>3} | {'search':>8} | {'beam':>4} | {'ours ms':>9} | {'NeMo ms':>9} | {'x':>6} | same best"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['batch_size']:>3} | {row['search']:>8} | {row['beam_size']:>4} | {row['ms']:>9.1f} | "
            f"{row['nemo_ms']:>9.1f} | {row['speedup_vs_nemo']:>5.2f}x | {row['same_best']}/{row['batch_size']}"
        )
    command = ("python benchmarks/beam.py " + " ".join(sys.argv[1:])).strip()
    print(f"reproduce: {command}")
    print(
        json.dumps(
            {
                "benchmark": "beam_vs_nemo",
                "command": command,
                "kind": args.kind,
                **machine("cpu"),
                "frames": args.frames,
                "blank_bias": round(blank_bias, 3),
                "rows": rows,
            }
        )
    )


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    if args.nemo:
        main_nemo(args)
        return
    model = TinyTransducer(
        vocab_size=args.vocab_size,
        encoder_dim=args.hidden,
        prediction_dim=args.hidden,
        joint_dim=args.hidden,
        durations=KINDS[args.kind],
        seed=0,
    )
    if args.blank_bias is None:
        blank_bias = calibrate_blank_bias(model, frames_per_label=3.0)
    else:
        model.set_blank_bias(args.blank_bias)
        blank_bias = args.blank_bias
    rate = emission_rate(model, frames=256, seed=1)
    model = model.to(args.device)
    graphs = not args.no_cuda_graphs and args.device == "cuda"
    greedy = LabelLoopingGreedy(model, GreedyConfig(use_cuda_graphs=graphs))

    generator = torch.Generator().manual_seed(0)
    rows = []
    for batch_size in args.batch_sizes:
        encoder_output = torch.randn(batch_size, args.frames, args.hidden, generator=generator).to(args.device)
        lengths = torch.randint(int(args.frames * 0.8), args.frames + 1, (batch_size,), generator=generator)
        lengths[0] = args.frames
        lengths = lengths.to(args.device)
        greedy_ms, _ = timed(lambda x=encoder_output, n=lengths: greedy(x, n), args.repeats, args.device)
        sample = min(args.reference_utterances, batch_size)
        for name, (search_class, reference) in SEARCHES.items():
            if args.kind != "rnnt" and not search_class.supports_tdt:
                continue
            for beam_size in args.beams:
                config = BeamSearchConfig(beam_size=beam_size, window_size=args.window, use_cuda_graphs=graphs)
                decoder = search_class(model, config)
                batched_ms, hypotheses = timed(
                    lambda d=decoder, x=encoder_output, n=lengths: d(x, n), args.repeats, args.device
                )
                start = time.perf_counter()
                expected = reference(model, encoder_output[:sample].cpu(), lengths[:sample].cpu(), config)
                reference_ms = (time.perf_counter() - start) * 1000 * batch_size / sample
                got = hypotheses.to_list()[:sample]
                if [h.tokens for h in got] != [e[0].tokens for e in expected]:
                    raise SystemExit(f"{name} beam {beam_size} disagrees with the reference at batch {batch_size}")
                rows.append(
                    {
                        "batch_size": batch_size,
                        "search": name,
                        "beam_size": beam_size,
                        "ms": round(batched_ms, 2),
                        "greedy_ms": round(greedy_ms, 2),
                        "reference_ms": round(reference_ms, 1),
                        "x_greedy_time": round(batched_ms / greedy_ms, 2),
                        "speedup_vs_reference": round(reference_ms / batched_ms, 1),
                    }
                )

    print(
        f"transducer beam search ({args.kind}), decoder only: {args.frames} frames, WIND window {args.window}, "
        f"V={args.vocab_size}, "
        f"hidden={args.hidden}, {rate:.3f} labels/frame (blank bias {blank_bias:.2f}), device {args.device}"
        f"{' with CUDA graphs' if graphs else ''}, {torch.get_num_threads()} threads; median of {args.repeats}"
    )
    print(
        "time = batched beam search; x greedy = its time / label-looping greedy's; "
        "x ref = per-utterance reference time / batched time"
    )
    header = (
        f"{'B':>3} | {'search':>8} | {'beam':>4} | {'time ms':>9} | {'greedy ms':>9} | {'x greedy':>8} | "
        f"{'ref ms':>10} | {'x ref':>7}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['batch_size']:>3} | {row['search']:>8} | {row['beam_size']:>4} | {row['ms']:>9.1f} | "
            f"{row['greedy_ms']:>9.1f} | {row['x_greedy_time']:>7.2f}x | {row['reference_ms']:>10.0f} | "
            f"{row['speedup_vs_reference']:>6.1f}x"
        )
    command = ("python benchmarks/beam.py " + " ".join(sys.argv[1:])).strip()
    print(f"reproduce: {command}")
    print(
        json.dumps(
            {
                "benchmark": "beam",
                "command": command,
                **machine(args.device),
                "cuda_graphs": graphs,
                "kind": args.kind,
                "frames": args.frames,
                "vocab_size": args.vocab_size,
                "hidden": args.hidden,
                "labels_per_frame": round(rate, 4),
                "reference_utterances": args.reference_utterances,
                "window": args.window,
                "blank_bias": round(blank_bias, 3),
                "rows": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
