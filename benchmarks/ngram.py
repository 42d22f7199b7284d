"""Speed of the n-gram LM: full-vocabulary `advance` against a KenLM per-label loop, and greedy + LM overhead.

1. `NgramLm.advance` scores every label of the vocabulary from B states at once; the KenLM peer asks
   `BaseScore` once per (state, label), as a CPU decoder without a batched LM must. Both run on the same
   random back-off LMs (V labels, orders 3, 6, 10), from the same states, reached by walking listed n-grams
   so that long contexts occur; the first run also checks that the scores agree.
2. Label-looping greedy with the LM fused (order 6) against greedy without it, decoder only, on a tiny
   transducer calibrated to a trained model's emission rate (about one label per 3 frames).

Everything runs side by side in one process; times are the best of interleaved rounds.

    python benchmarks/ngram.py            # full table
    python benchmarks/ngram.py --quick    # under a minute on a 2-core CPU
    python benchmarks/ngram.py --device cuda

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from decoders.ngram import (  # noqa: E402
    BOS_ID,
    EOS_ID,
    UNK_ID,
    NgramLm,  # noqa: E402
    id_to_token,
    write_arpa,
)
from decoders.transducer import GreedyConfig, LabelLoopingGreedy, TinyTransducer, calibrate_blank_bias  # noqa: E402  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller LMs, fewer frames and repeats")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--orders", type=int, nargs="+", default=[3, 6, 10])
    parser.add_argument("--ngrams-per-order", type=int, default=100_000, help="n-grams of each order above 1")
    parser.add_argument("--fusion-order", type=int, default=6)
    parser.add_argument("--frames", type=int, default=250, help="encoder frames per utterance (250 = 20 s)")
    parser.add_argument("--hidden", type=int, default=320)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (KenLM's loop uses one)")
    args = parser.parse_args()
    if args.quick:
        args.ngrams_per_order, args.frames, args.repeats = 10_000, 40, 3
    return args


def random_lm_ngrams(rng: random.Random, order: int, vocab_size: int, per_order: int) -> dict:
    """A random back-off LM whose n-grams keep every suffix listed (as Kneser-Ney training gives)."""
    ngrams = {(label,): (-rng.uniform(1.0, 4.0), rng.uniform(-1.0, 0.0)) for label in range(vocab_size)}
    ngrams[(BOS_ID,)] = (-99.0, -0.5)
    ngrams[(EOS_ID,)] = (-2.0, 0.0)
    ngrams[(UNK_ID,)] = (-6.0, 0.0)
    lower = [key for key in ngrams if key[0] not in (EOS_ID, UNK_ID)]
    for k in range(2, order + 1):
        extensions: dict[tuple, list[int]] = {}
        for key in lower if k > 2 else [key for key in ngrams if len(key) == 1 and key[0] >= 0]:
            extensions.setdefault(key[:-1] if k > 2 else (), []).append(key[-1])
        contexts = [key for key in lower if extensions.get(key[1:])]
        grams = []
        for _ in range(per_order * 3):
            if len(grams) >= per_order:
                break
            context = rng.choice(contexts)
            key = context + (rng.choice(extensions[context[1:]]),)
            if key not in ngrams:
                ngrams[key] = (-rng.uniform(0.1, 2.0), rng.uniform(-1.0, 0.0) if k < order else 0.0)
                grams.append(key)
        lower = grams
    return ngrams


def reached_states(lm: NgramLm, ngrams: dict, batch_size: int, rng: random.Random) -> tuple[torch.Tensor, list]:
    """B states after walking long listed n-grams from <s>, and the token histories that lead there."""
    long_grams = sorted((key for key in ngrams if len(key) == lm.max_order and key[0] >= 0), key=str)
    histories = []
    for _ in range(batch_size):
        histories.append(list(rng.choice(long_grams)) if long_grams else [rng.randrange(lm.vocab_size)])
    states = lm.initial_states(batch_size)
    for position in range(max(len(h) for h in histories)):
        _, next_states = lm.advance(states)
        for row, history in enumerate(histories):
            if position < len(history):
                states[row] = next_states[row, history[position]]
    return states, histories


def kenlm_advance(model, kenlm, histories: list, words: list[str]) -> list[list[float]]:
    """The KenLM peer: one BaseScore call per (state, label)."""
    rows = []
    out = kenlm.State()
    for history in histories:
        state, scratch = kenlm.State(), kenlm.State()
        model.BeginSentenceWrite(state)
        for token in history:
            model.BaseScore(state, id_to_token(token), scratch)
            state, scratch = scratch, state
        rows.append([model.BaseScore(state, word, out) for word in words])
    return rows


def kenlm_states(model, kenlm, histories: list) -> list:
    states = []
    for history in histories:
        state, scratch = kenlm.State(), kenlm.State()
        model.BeginSentenceWrite(state)
        for token in history:
            model.BaseScore(state, id_to_token(token), scratch)
            state, scratch = scratch, state
        states.append(state)
    return states


def best_of(function, repeats: int, device: str) -> float:
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        function()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    return min(times)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    try:
        import kenlm
    except ImportError:
        kenlm = None
    rng = random.Random(0)
    scratch = Path(tempfile.mkdtemp(prefix="ngram_bench_"))
    advance_rows = {}
    lms = {}
    for order in sorted(set(args.orders) | {args.fusion_order}):
        ngrams = random_lm_ngrams(rng, order, args.vocab_size, args.ngrams_per_order)
        path = scratch / f"order{order}.arpa"
        write_arpa(path, ngrams)
        started = time.perf_counter()
        lm = NgramLm.from_arpa(path, args.vocab_size).to(args.device)
        load_s = time.perf_counter() - started
        lms[order] = lm
        if order not in args.orders:
            continue
        states, histories = reached_states(lm, ngrams, args.batch_size, rng)
        row = {"ngrams": sum(lm.ngram_counts), "arcs": lm.tensors.num_arcs, "arpa_load_s": round(load_s, 2)}
        ours_ms = best_of(lambda lm=lm, states=states: lm.advance(states), args.repeats, args.device)
        row["ngram_lm_ms"] = round(ours_ms, 3)
        if kenlm is not None:
            model = kenlm.Model(str(path))
            words = [id_to_token(label) for label in range(args.vocab_size)]
            expected = torch.tensor(kenlm_advance(model, kenlm, histories, words), dtype=torch.float64) * math.log(10)
            got = lm.advance(states)[0].double().cpu()
            row["max_abs_diff_vs_kenlm"] = float((got - expected).abs().max())
            if row["max_abs_diff_vs_kenlm"] > 1e-3:
                raise SystemExit(f"order {order}: NgramLm and KenLM disagree by {row['max_abs_diff_vs_kenlm']}")
            kenlm_start = kenlm_states(model, kenlm, histories)
            out = kenlm.State()

            def kenlm_loop(model=model, starts=kenlm_start, words=words, out=out):
                for state in starts:
                    for word in words:
                        model.BaseScore(state, word, out)

            row["kenlm_loop_ms"] = round(best_of(kenlm_loop, args.repeats, "cpu"), 3)
            row["speedup_vs_kenlm"] = round(row["kenlm_loop_ms"] / ours_ms, 2)
        row["labels_per_s"] = round(args.batch_size * args.vocab_size / (ours_ms / 1000))
        advance_rows[order] = row

    # greedy decoding with and without the LM
    model = TinyTransducer(vocab_size=args.vocab_size, encoder_dim=args.hidden, prediction_dim=args.hidden,
                           joint_dim=args.hidden, seed=0)
    calibrate_blank_bias(model, frames_per_label=3.0)
    model = model.to(args.device)
    fusion_lm = lms[args.fusion_order]
    graphs = args.device == "cuda"
    decoders = {"greedy": LabelLoopingGreedy(model, GreedyConfig(use_cuda_graphs=graphs)),
                "greedy_lm": LabelLoopingGreedy(model, GreedyConfig(use_cuda_graphs=graphs, lm_weight=0.3),
                                                lm=fusion_lm)}
    generator = torch.Generator().manual_seed(0)
    encoder_output = torch.randn(args.batch_size, args.frames, args.hidden, generator=generator).to(args.device)
    lengths = torch.randint(int(args.frames * 0.8), args.frames + 1, (args.batch_size,), generator=generator)
    lengths[0] = args.frames
    lengths = lengths.to(args.device)
    for decode in decoders.values():
        decode(encoder_output, lengths)  # warm-up (and CUDA graph capture)
    fusion_ms = {name: [] for name in decoders}
    names = list(decoders)
    for round_index in range(max(args.repeats, 5)):  # decoding times vary most under load: at least 5 rounds
        for name in names[round_index % 2:] + names[: round_index % 2]:
            fusion_ms[name].append(best_of(lambda d=decoders[name]: d(encoder_output, lengths), 1, args.device))
    fusion = {name: round(min(values), 3) for name, values in fusion_ms.items()}
    overhead = fusion["greedy_lm"] / fusion["greedy"] - 1
    # the LM's own share, timed inside one fused decode: steadier than a difference of two loaded wall times
    advance_calls, advance_ms = 0, 0.0
    plain_advance = fusion_lm.advance

    def timed_advance(states):
        nonlocal advance_calls, advance_ms
        if args.device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        result = plain_advance(states)
        if args.device == "cuda":
            torch.cuda.synchronize()
        advance_calls += 1
        advance_ms += (time.perf_counter() - start) * 1000
        return result

    fusion_lm.advance = timed_advance
    started = time.perf_counter()
    LabelLoopingGreedy(model, GreedyConfig(use_cuda_graphs=False, lm_weight=0.3), lm=fusion_lm)(encoder_output,
                                                                                                lengths)
    timed_decode_ms = (time.perf_counter() - started) * 1000
    fusion_lm.advance = plain_advance
    advance_share = advance_ms / timed_decode_ms
    labels = sum(len(h.tokens) for h in decoders["greedy"](encoder_output, lengths).to_list())

    print(f"n-gram LM, device {args.device}, {torch.get_num_threads()} torch threads, V={args.vocab_size}, "
          f"B={args.batch_size}; random back-off LMs with up to {args.ngrams_per_order} n-grams per order")
    print(f"1. full-vocabulary advance (B x V = {args.batch_size * args.vocab_size} scores), best of {args.repeats}")
    header = (f"{'order':>5} | {'n-grams':>8} | {'NgramLm ms':>10} | {'KenLM loop ms':>13} | {'x KenLM':>7} | "
              f"{'labels/s':>11} | {'max |diff|':>10}")
    print(header)
    print("-" * len(header))
    for order, row in advance_rows.items():
        missing = float("nan")
        print(f"{order:>5} | {row['ngrams']:>8} | {row['ngram_lm_ms']:>10.2f} | "
              f"{row.get('kenlm_loop_ms', missing):>13.2f} | {row.get('speedup_vs_kenlm', missing):>7.2f} | "
              f"{row['labels_per_s']:>11.3g} | {row.get('max_abs_diff_vs_kenlm', missing):>10.2g}")
    if kenlm is None:
        print("(kenlm is not installed: no KenLM column; MAX_ORDER=10 pip install --no-cache-dir kenlm)")
    print(f"2. label-looping greedy, decoder only, {args.frames} frames, hidden {args.hidden}, {labels} labels; "
          f"LM order {args.fusion_order}")
    print(f"   greedy {fusion['greedy']:.1f} ms, greedy + LM {fusion['greedy_lm']:.1f} ms: "
          f"LM overhead {100 * overhead:.1f}% (difference of best wall times)")
    print(f"   inside one fused decode: {advance_calls} LM advance calls, {advance_ms:.1f} ms of "
          f"{timed_decode_ms:.1f} ms ({100 * advance_share:.1f}%)")
    command = ("python benchmarks/ngram.py " + " ".join(sys.argv[1:])).strip()
    print(f"reproduce: OMP_WAIT_POLICY=PASSIVE {command}")
    print(json.dumps({
        "benchmark": "ngram",
        "command": command,
        "device": args.device,
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "vocab_size": args.vocab_size,
        "batch_size": args.batch_size,
        "ngrams_per_order": args.ngrams_per_order,
        "advance": {str(order): row for order, row in advance_rows.items()},
        "fusion": {"order": args.fusion_order, "frames": args.frames, "hidden": args.hidden, "labels": labels,
                   "ms": fusion, "lm_overhead": round(overhead, 4), "advance_calls": advance_calls,
                   "advance_ms": round(advance_ms, 3), "advance_share_of_fused_decode": round(advance_share, 4)},
    }))


if __name__ == "__main__":
    main()
