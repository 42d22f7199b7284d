"""Speed and accuracy of CTC prefix beam search with blank collapse, and against `ctc-beam-decoder`.

Everything runs side by side in one process on the same synthetic emissions: peaky like a trained CTC model's
(about 60% of frames are confident blanks; label spikes of 1-2 frames, a third with a rival label that wins
acoustically up to 1 nat of the time) spelling label sequences sampled from a random token-level bigram LM,
which every decoder with an LM fuses (ours through `NgramLm` when decoders/ngram is present, else the same
table; `ctc-beam-decoder` through KenLM with the word trick of REFERENCE.md section 3). Pruning is the same
for all beam searches: beam size K, beam threshold (pyctcdecode's beam_prune_logp) and token_min_log_prob
(its token_min_logp); ours also caps the labels per frame at M. Token error rates (TER) are against the
sampled label sequences. Ratios are speed-ups over our beam search without collapse.

    python benchmarks/ctc.py            # full table
    python benchmarks/ctc.py --quick    # under a minute on a 2-core CPU
    python benchmarks/ctc.py --device cuda

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._timing import interleaved_ms, machine  # noqa: E402
from decoders.ctc import CtcGreedy, collapse_blanks  # noqa: E402
from decoders.ctc_beam import CtcBeamConfig, CtcBeamSearch  # noqa: E402
from tests.reference.ctc import (  # noqa: E402
    nemo_symbol,
    peaky_emissions_with_tokens,
    random_bigram_arpa,
    write_token_arpa,
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer and shorter utterances, one repeat")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[128, 1024], help="V, blank included")
    parser.add_argument("--utterances", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32, help="utterances per call of our decoders")
    parser.add_argument("--frames", type=int, default=250, help="frames of the longest utterance (250 = 20 s)")
    parser.add_argument("--beam-size", type=int, default=8)
    parser.add_argument("--lm-weight", type=float, default=0.5)
    parser.add_argument("--beam-threshold", type=float, default=10.0)
    parser.add_argument("--token-min-log-prob", type=float, default=-5.0)
    parser.add_argument("--max-labels-per-frame", type=int, default=16)
    parser.add_argument("--thresholds", nargs="+", default=["0.9", "0.99", "0.999", "weak"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (CPU actors use 1 each)")
    args = parser.parse_args()
    if args.quick:
        args.utterances, args.batch_size, args.frames, args.repeats = 16, 16, 150, 1
    return args


def peer_symbol(token: int) -> str:
    # chr(i + 100) would include chr(133) and chr(160), which the peer's binding splits words on
    return chr(0x4E00 + token)


def edit_distance(a: list[int], b: list[int]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, start=1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


def make_inputs(args, vocab_size: int, table_lm, seed: int):
    """Ragged utterances (80-100% of the longest), padded: log_probs [U, T, V], lengths [U], label sequences."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(int(args.frames * 0.8), args.frames + 1, (args.utterances,), generator=generator)
    lengths[0] = args.frames
    log_probs = torch.zeros(args.utterances, args.frames, vocab_size)
    log_probs[..., vocab_size - 1] = 0.0
    truths = []
    for u, length in enumerate(lengths.tolist()):
        emissions, spelled = peaky_emissions_with_tokens(
            1, length, vocab_size, vocab_size - 1, seed=seed * 1000 + u, lm=table_lm, rival_wins=1.0
        )
        log_probs[u, :length] = emissions[0]
        truths.append(spelled[0])
    return log_probs, lengths, truths


def load_lms(vocab_size: int, folder: Path, seed: int):
    ngrams, table_lm = random_bigram_arpa(vocab_size - 1, seed=seed, listed_per_context=32)
    nemo_arpa, peer_arpa = folder / f"v{vocab_size}_nemo.arpa", folder / f"v{vocab_size}_peer.arpa"
    write_token_arpa(nemo_arpa, ngrams, nemo_symbol)
    write_token_arpa(peer_arpa, ngrams, peer_symbol)
    if importlib.util.find_spec("decoders.ngram") is not None:
        from decoders.ngram.lm import NgramLm

        return table_lm, NgramLm.from_arpa(nemo_arpa, vocab_size=vocab_size - 1), "NgramLm", peer_arpa
    return table_lm, table_lm, "table bigram (decoders/ngram absent)", peer_arpa


def run_ours(decode, log_probs, lengths, batch_size: int, device: str) -> list[list[int]]:
    tokens = []
    for start in range(0, log_probs.shape[0], batch_size):
        batch = log_probs[start : start + batch_size].to(device)
        hypotheses = decode(batch, lengths[start : start + batch_size].to(device))
        tokens.extend(h.tokens for h in hypotheses.to_list())
    return tokens


def timed_side_by_side(runs: dict, repeats: int, device: str) -> dict[str, tuple[float, list[list[int]]]]:
    """Median wall time in seconds of each run over `repeats` interleaved rounds, after one warm-up round, and
    its output."""
    times, outputs = interleaved_ms(runs, repeats, device)
    return {name: (statistics.median(times[name]) / 1000, outputs[name]) for name in runs}


def bench_vocab(args, vocab_size: int, folder: Path) -> dict:
    blank_id = vocab_size - 1
    table_lm, lm, lm_name, peer_arpa = load_lms(vocab_size, folder, seed=vocab_size)
    log_probs, lengths, truths = make_inputs(args, vocab_size, table_lm, seed=vocab_size)
    if args.device == "cuda":
        lm = lm.to("cuda") if hasattr(lm, "to") else lm

    def beam(threshold):
        config = CtcBeamConfig(
            beam_size=args.beam_size,
            lm_weight=args.lm_weight,
            beam_threshold=args.beam_threshold,
            token_min_log_prob=args.token_min_log_prob,
            max_labels_per_frame=args.max_labels_per_frame,
            collapse_threshold=threshold,
        )
        decode = CtcBeamSearch(blank_id, config, lm)
        return lambda: run_ours(decode, log_probs, lengths, args.batch_size, args.device)

    runs = {"greedy": lambda: run_ours(CtcGreedy(blank_id), log_probs, lengths, args.batch_size, args.device)}
    runs["greedy+lm"] = lambda: run_ours(
        CtcGreedy(blank_id, lm, args.lm_weight), log_probs, lengths, args.batch_size, args.device
    )
    runs["beam"] = beam(None)
    for threshold in args.thresholds:
        runs[f"beam, collapse {threshold}"] = beam(threshold if threshold == "weak" else float(threshold))
    kept = {"greedy": 1.0, "greedy+lm": 1.0, "beam": 1.0}
    for threshold in args.thresholds:
        _, collapsed_lengths, _ = collapse_blanks(
            log_probs, lengths, blank_id, None if threshold == "weak" else float(threshold)
        )
        kept[f"beam, collapse {threshold}"] = float(collapsed_lengths.sum() / lengths.sum())
    if importlib.util.find_spec("ctc_beam_decoder") is not None:
        import ctc_beam_decoder

        labels = ["▁" + peer_symbol(i) for i in range(vocab_size - 1)] + [""]  # "" is the blank
        peer = ctc_beam_decoder.BeamSearchDecoder(labels, kenlm_model_path=peer_arpa, alpha=args.lm_weight, beta=0.0)
        arrays = [log_probs[u, :length].numpy() for u, length in enumerate(lengths.tolist())]

        def run_peer() -> list[list[int]]:
            texts = [
                peer.decode_beams(
                    array,
                    beam_width=args.beam_size,
                    beam_prune_logp=-args.beam_threshold,
                    token_min_logp=args.token_min_log_prob,
                )[0][0]
                for array in arrays
            ]
            return [[ord(word) - 0x4E00 for word in text.split(" ") if word] for text in texts]

        runs["ctc-beam-decoder"] = run_peer
        kept["ctc-beam-decoder"] = 1.0

    results = {
        name: {"seconds": seconds, "tokens": tokens}
        for name, (seconds, tokens) in timed_side_by_side(runs, args.repeats, args.device).items()
    }
    reference_tokens = results["beam"]["tokens"]
    total_truth = sum(len(t) for t in truths)
    rows = {}
    for name, result in results.items():
        errors = sum(edit_distance(h, t) for h, t in zip(result["tokens"], truths))
        rows[name] = {
            "frames_kept": kept[name],
            "ms_per_utterance": 1000 * result["seconds"] / args.utterances,
            "speedup_vs_beam": results["beam"]["seconds"] / result["seconds"],
            "ter_percent": 100 * errors / max(total_truth, 1),
            "same_text_as_beam_percent": 100
            * sum(a == b for a, b in zip(result["tokens"], reference_tokens))
            / args.utterances,
        }
    confident = float((log_probs[..., blank_id].exp() > 0.9).float().sum() / lengths.sum())
    return {"vocab_size": vocab_size, "lm": lm_name, "confident_blank_fraction": confident, "rows": rows}


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        results = [bench_vocab(args, vocab_size, Path(folder)) for vocab_size in args.vocab_sizes]

    print(
        f"CTC decoding on peaky synthetic emissions: {args.utterances} utterances of "
        f"{int(args.frames * 0.8)}-{args.frames} frames, beam {args.beam_size}, LM weight {args.lm_weight}, "
        f"beam threshold {args.beam_threshold}, token_min_log_prob {args.token_min_log_prob}, "
        f"our labels per frame <= {args.max_labels_per_frame}, our batch {args.batch_size}, device {args.device}, "
        f"{torch.get_num_threads()} threads"
    )
    print("x = speed-up over our beam search without collapse; TER against the sampled label sequences")
    for result in results:
        print(
            f"\nV={result['vocab_size']} (LM: {result['lm']}; "
            f"{100 * result['confident_blank_fraction']:.0f}% frames with p(blank) > 0.9)"
        )
        header = (
            f"{'decoder':<22} | {'frames kept':>11} | {'ms/utt':>8} | {'x':>6} | {'TER %':>6} | {'same as beam':>12}"
        )
        print(header)
        print("-" * len(header))
        for name, row in result["rows"].items():
            print(
                f"{name:<22} | {100 * row['frames_kept']:10.0f}% | {row['ms_per_utterance']:8.2f} | "
                f"{row['speedup_vs_beam']:5.2f}x | {row['ter_percent']:6.2f} | "
                f"{row['same_text_as_beam_percent']:11.0f}%"
            )
    command = "python benchmarks/ctc.py " + " ".join(sys.argv[1:])
    print(f"\nreproduce: {command.strip()}")
    summary = {
        "benchmark": "ctc",
        "command": command.strip(),
        **machine(args.device),
        "config": {k: v for k, v in vars(args).items() if k != "quick"},
        "results": results,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
