"""Our greedy decoding vs NeMo's `greedy_batch` on the same NeMo model and audio, on the CPU.

Two measurements, each at batch size 1 (utterances one at a time) and 32 (one padded batch):
- decoder only: encoder output -> token ids with frames as host lists (ours: `LabelLoopingGreedy` or
  `CtcGreedy` + `to_list()`; NeMo: its greedy_batch decoding computer, which returns `Hypothesis` objects);
- end to end: padded waveforms -> text and word timestamps in seconds (ours: `GreedyRecognizer`; NeMo:
  `forward` + `*_decoder_predictions_tensor` with timestamps + `process_timestamp_outputs`, which is what
  `transcribe()` runs after its data loader).
Both run side by side in one process, alternating, on the same model; figures are medians, and ratios are
NeMo's time over ours (above 1: ours is faster). Tokens are checked equal before timing.

The model is a `.nemo` given with `--model`, or a random FastConformer built here from NeMo's example
config layout (`tests/support/random_nemo.py`), calibrated to emit about one label per 3 frames, with a
SentencePiece tokenizer trained on the spot (or taken from `--tokenizer`). Audio is espeak-ng speech.

    python benchmarks/nemo_greedy.py --quick                      # about a minute on a 2-core CPU
    python benchmarks/nemo_greedy.py --kind tdt_ctc --head ctc
    python benchmarks/nemo_greedy.py --model /path/to/model.nemo

Needs nemo_toolkit[asr]. The last line of output is one JSON object with every figure.
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
from benchmarks._nemo import NemoDecoding  # noqa: E402
from benchmarks._timing import interleaved_ms, machine  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="a small random model (unless --model), 4 utterances at batch 1")
    parser.add_argument("--model", help="a .nemo file (local or any fsspec URI) instead of a random model")
    parser.add_argument("--kind", default="rnnt", choices=["rnnt", "tdt_ctc", "ctc"], help="random model kind")
    parser.add_argument("--head", default=None, choices=["transducer", "ctc"], help="default: the first head")
    parser.add_argument("--tokenizer", help="a NeMo SentencePiece tokenizer folder for the random model")
    parser.add_argument("--vocab-size", type=int, default=64, help="tokenizer trained here when no --tokenizer")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=320, help="prediction network and joint width")
    parser.add_argument("--utterances", type=int, default=32, help="audio files (batch size 32 uses 32)")
    parser.add_argument("--single", type=int, default=16, help="utterances decoded one at a time for batch 1")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed rounds (fewer: on a shared machine one slow round moves a median of 2 by 2x)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    if args.quick:
        args.d_model, args.layers, args.hidden = 128, 2, 128
        args.single = 4
    return args


def build_model(args, workdir: Path):
    from pipeline.model import AsrModel, load_asr_model
    from tests.support import random_nemo

    sentences = (random_nemo.SENTENCES * ((args.utterances + 11) // 12))[: args.utterances]
    files = random_nemo.synthesize(workdir / "audio", sentences)
    import soundfile

    waveforms = [soundfile.read(path, dtype="float32")[0] for path in files]
    if args.model:
        return load_asr_model(args.model), waveforms, {"model": args.model}
    tokenizer = Path(args.tokenizer) if args.tokenizer else random_nemo.train_tokenizer(
        workdir / "tokenizer", vocab_size=args.vocab_size)
    nemo_model = random_nemo.build_random_model(args.kind, tokenizer, d_model=args.d_model,
                                                n_layers=args.layers, hidden=args.hidden)
    biases = random_nemo.calibrate_emission(nemo_model, waveforms[:8])
    return AsrModel(nemo_model), waveforms, {"model": f"random {args.kind}", "blank_biases": biases}


def side_by_side(ours, nemo, batches, repeats: int) -> tuple[float, float]:
    """Median total ms over the batches for each, in interleaved rounds after one warm-up round."""
    times, _ = interleaved_ms({"ours": lambda: [ours(*batch) for batch in batches],
                               "nemo": lambda: [nemo(*batch) for batch in batches]}, repeats)
    return statistics.median(times["ours"]), statistics.median(times["nemo"])


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    from pipeline.decoding import GreedyRecognizer, pad_waveforms

    with tempfile.TemporaryDirectory() as tmp:
        model, waveforms, about = build_model(args, Path(tmp))
    head = args.head or model.heads[0]
    ours = GreedyRecognizer(model, head)
    nemo = NemoDecoding(model, head)  # greedy_batch

    def ours_decoder_only(encoder_output, encoder_lengths):
        return ours.decode(encoder_output, encoder_lengths).to_list()

    def ours_end_to_end(audio, lengths):
        return ours(audio, lengths)

    rows, figures = [], {}
    frames_total = labels_total = 0
    for batch_size in (1, 32):
        groups = [[w] for w in waveforms[: args.single]] if batch_size == 1 else [waveforms[:32]]
        audio_batches = [pad_waveforms(group) for group in groups]
        encoded_batches = [model.encode(*batch) for batch in audio_batches]
        utterances = sum(len(group) for group in groups)
        # the same tokens on every batch before anything is timed
        for encoder_output, encoder_lengths in encoded_batches:
            mine = [h.tokens for h in ours_decoder_only(encoder_output, encoder_lengths)]
            theirs = [[int(t) for t in h.y_sequence] if head == "transducer" else list(h.y_sequence)
                      for h in nemo.decoder_only(encoder_output, encoder_lengths)]
            if head == "ctc":  # NeMo's CTC hypotheses hold per-frame labels: collapse them as NeMo's decoding does
                theirs = [_collapse(labels, model.ctc.blank_id) for labels in theirs]
            if mine != theirs:
                raise SystemExit(f"tokens differ from NeMo's at batch size {batch_size}: not timing")
            if batch_size == 32:
                frames_total = int(encoder_lengths.sum())
                labels_total = sum(len(t) for t in mine)
        for stage, (our_function, nemo_function, batches) in {
            "decoder only": (ours_decoder_only, nemo.decoder_only, encoded_batches),
            "end to end": (ours_end_to_end, nemo.end_to_end, audio_batches),
        }.items():
            ours_ms, nemo_ms = side_by_side(our_function, nemo_function, batches, args.repeats)
            key = f"{stage.replace(' ', '_')}_b{batch_size}"
            figures[key] = {"ours_ms_per_utt": ours_ms / utterances, "nemo_ms_per_utt": nemo_ms / utterances,
                            "nemo_over_ours": nemo_ms / ours_ms}
            rows.append((stage, batch_size, ours_ms / utterances, nemo_ms / utterances, nemo_ms / ours_ms))

    seconds = sum(len(w) for w in waveforms[:32]) / model.sample_rate
    print(f"model: {about['model']} ({model.kind}, head {head}, "
          f"{sum(p.numel() for p in model.nemo_model.parameters()) / 1e6:.1f} M parameters, "
          f"vocabulary {model.tokenizer.vocab_size}); 32 utterances, {seconds:.0f} s of audio, "
          f"{labels_total / max(frames_total, 1):.2f} labels per frame; CPU, {args.threads} thread(s)")
    header = f"{'stage':<13} | {'batch':>5} | {'ours ms/utt':>11} | {'NeMo ms/utt':>11} | {'NeMo / ours':>11}"
    print(header)
    print("-" * len(header))
    for stage, batch_size, ours_ms, nemo_ms, ratio in rows:
        print(f"{stage:<13} | {batch_size:>5} | {ours_ms:>11.2f} | {nemo_ms:>11.2f} | {ratio:>11.2f}")
    print("command: python benchmarks/nemo_greedy.py " + " ".join(sys.argv[1:]))
    print(json.dumps({
        "benchmark": "nemo_greedy", "args": vars(args), "head": head, "kind": model.kind, **about,
        "labels_per_frame": labels_total / max(frames_total, 1), "audio_s": seconds, "figures": figures,
        **machine("cpu"), "wall_s": time.perf_counter() - started,
    }))


def _collapse(labels: list[int], blank_id: int) -> list[int]:
    tokens, previous = [], blank_id
    for label in labels:
        label = int(label)
        if label != blank_id and label != previous:
            tokens.append(label)
        previous = label
    return tokens


if __name__ == "__main__":
    main()
