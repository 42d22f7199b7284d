"""Speed and accuracy of CTC prefix beam search with blank collapse, and against `ctc-beam-decoder`.

Everything runs side by side in one process on the same synthetic emissions: peaky like a trained CTC model's
(about 60% of frames are confident blanks; label spikes of 1-2 frames, a third with a rival label that wins
acoustically up to 1 nat of the time) spelling label sequences sampled from a random token-level bigram LM,
which every decoder with an LM fuses (ours through `NgramLm` when decoders/ngram is present, else the same
table; `ctc-beam-decoder` through KenLM with the word trick of REFERENCE.md section 3). Pruning is the same
for all beam searches: beam size K, beam threshold (pyctcdecode's beam_prune_logp) and token_min_log_prob
(its token_min_logp); ours also caps the labels per frame at M. Token error rates (TER) are against the
sampled label sequences. Ratios are speed-ups over our beam search without collapse, and over the peer.
"compiled" rows are `decoders/ctc/beam_cpu.py::CpuCtcBeamSearch` (numba; the CPU actors' search), which must give
the torch search's text; its threads (a pool over the utterances of a batch) follow `--threads`.

With `--domain`, the bundled model and domain test set too (`samples/domain/test.json`, 100 utterances, the
6-gram token LM built from `samples/domain/lm_text.txt` as benchmarks/accuracy.py builds it, ARPA written for
the peer with the same n-grams): the CTC head's log-probs of every utterance, decoded side by side by the torch
search, the compiled search (without and with the pipeline's blank collapse at 0.9) and ctc-beam-decoder at the
same beam size, LM, LM weight, insertion bonus (the peer's beta: one word per token) and beam threshold; ours
prune no labels (the pipeline's setting), except the row "compiled, peer's pruning", which prunes as the peer
does (`token_min_log_prob` = its token_min_logp, default -5, `--domain-token-min-log-prob`). WER and CER by
jiwer against the references.

    python benchmarks/ctc.py            # full table
    python benchmarks/ctc.py --quick    # under a minute on a 2-core CPU
    python benchmarks/ctc.py --domain   # the domain set too (one thread: --threads 1, the default)
    python benchmarks/ctc.py --vocab-sizes --domain --repeats 9   # the domain set only
    python benchmarks/ctc.py --device cuda

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
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
from decoders.ctc import (  # noqa: E402  # noqa: E402
    CpuCtcBeamSearch,  # noqa: E402
    CtcBeamConfig,
    CtcBeamSearch,
    CtcGreedy,
    collapse_blanks,
)
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
    parser.add_argument("--vocab-sizes", type=int, nargs="*", default=[128, 1024],
                        help="V, blank included (none: only the domain set, with --domain)")
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
    parser.add_argument("--domain", action="store_true", help="also the bundled model on the domain test set")
    parser.add_argument("--domain-beam-size", type=int, default=4, help="benchmarks/accuracy.py's beam")
    parser.add_argument("--domain-lm-weight", type=float, default=1.2, help="accuracy.py's pick for ctc_beam")
    parser.add_argument("--domain-bonus", type=float, default=6.0, help="insertion bonus (the peer's beta)")
    parser.add_argument("--domain-beam-threshold", type=float, default=20.0, help="the pipeline's default")
    parser.add_argument("--domain-token-min-log-prob", type=float, default=-5.0, help="the peer's token_min_logp")
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
        from decoders.ngram import NgramLm

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

    def beam(threshold, search=CtcBeamSearch):
        config = CtcBeamConfig(
            beam_size=args.beam_size,
            lm_weight=args.lm_weight,
            beam_threshold=args.beam_threshold,
            token_min_log_prob=args.token_min_log_prob,
            max_labels_per_frame=args.max_labels_per_frame,
            collapse_threshold=threshold,
        )
        decode = search(blank_id, config, lm)
        return lambda: run_ours(decode, log_probs, lengths, args.batch_size, args.device)

    runs = {"greedy": lambda: run_ours(CtcGreedy(blank_id), log_probs, lengths, args.batch_size, args.device)}
    runs["greedy+lm"] = lambda: run_ours(
        CtcGreedy(blank_id, lm, args.lm_weight), log_probs, lengths, args.batch_size, args.device
    )
    runs["beam"] = beam(None)
    for threshold in args.thresholds:
        runs[f"beam, collapse {threshold}"] = beam(threshold if threshold == "weak" else float(threshold))
    kept = {"greedy": 1.0, "greedy+lm": 1.0, "beam": 1.0}
    if args.device == "cpu":  # the compiled search (decoders/ctc/beam_cpu.py): CPU only
        runs["compiled"] = beam(None, CpuCtcBeamSearch)
        kept["compiled"] = 1.0
        for threshold in args.thresholds:
            runs[f"compiled, collapse {threshold}"] = beam(
                threshold if threshold == "weak" else float(threshold), CpuCtcBeamSearch
            )
    for threshold in args.thresholds:
        _, collapsed_lengths, _ = collapse_blanks(
            log_probs, lengths, blank_id, None if threshold == "weak" else float(threshold)
        )
        kept[f"beam, collapse {threshold}"] = float(collapsed_lengths.sum() / lengths.sum())
        if args.device == "cpu":
            kept[f"compiled, collapse {threshold}"] = kept[f"beam, collapse {threshold}"]
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
    peer_seconds = results["ctc-beam-decoder"]["seconds"] if "ctc-beam-decoder" in results else None
    rows = {}
    for name, result in results.items():
        errors = sum(edit_distance(h, t) for h, t in zip(result["tokens"], truths))
        rows[name] = {
            "frames_kept": kept[name],
            "ms_per_utterance": 1000 * result["seconds"] / args.utterances,
            "speedup_vs_beam": results["beam"]["seconds"] / result["seconds"],
            "speedup_vs_peer": peer_seconds / result["seconds"] if peer_seconds else None,
            "ter_percent": 100 * errors / max(total_truth, 1),
            "same_text_as_beam_percent": 100
            * sum(a == b for a, b in zip(result["tokens"], reference_tokens))
            / args.utterances,
        }
    confident = float((log_probs[..., blank_id].exp() > 0.9).float().sum() / lengths.sum())
    return {"vocab_size": vocab_size, "lm": lm_name, "confident_blank_fraction": confident, "rows": rows}


def bench_domain(args, folder: Path) -> dict:
    """The bundled model's CTC head on the domain test set, with the domain LM: WER and time per decoder."""
    import json as json_module

    import soundfile

    from decoders.ngram import BOS_ID, EOS_ID, UNK_ID, NgramLm, read_arpa
    from pipeline.config import BUNDLED_MODEL
    from pipeline.lm import build_lm, encode_set, score
    from pipeline.model import load_asr_model

    repository = Path(__file__).resolve().parent.parent
    domain = repository / "samples" / "domain"
    model = load_asr_model(str(BUNDLED_MODEL))
    rows = [json_module.loads(line) for line in (domain / "test.json").read_text().splitlines() if line.strip()]
    audio = [soundfile.read(domain / row["audio_filepath"], dtype="float32")[0] for row in rows]
    references = [row["text"] for row in rows]
    encoded = encode_set(model, audio, references, 16, model.facts.sample_rate)
    arrays: list = [None] * len(rows)  # [T, V] float32 CTC log-probs of each utterance, uncollapsed
    with torch.no_grad():
        for output, lengths, indices in encoded.batches:
            log_probs = model.ctc.log_probs(output).float()
            for b, row in enumerate(indices):
                arrays[row] = log_probs[b, : int(lengths[b])].contiguous()
    blank_id, vocab_size = model.ctc.blank_id, model.ctc.vocab_size + 1
    if blank_id != vocab_size - 1:
        raise ValueError(f"the peer's labels assume blank last, the model's blank is {blank_id} of {vocab_size}")

    lm_path, arpa_path, peer_arpa = folder / "domain.lm", folder / "domain.arpa", folder / "domain_peer.arpa"
    build_lm([domain / "lm_text.txt"], str(BUNDLED_MODEL), lm_path, order=6, arpa=arpa_path)
    lm = NgramLm.load(lm_path)
    arpa = read_arpa(arpa_path)
    specials = {BOS_ID: "<s>", EOS_ID: "</s>", UNK_ID: "<unk>"}
    ngrams = {tuple(specials.get(int(t), int(t)) for t in key): (float(p), float(b))
              for table, probs, backoffs in zip(arpa.tokens, arpa.log10_probs, arpa.log10_backoffs)
              for key, p, b in zip(table.reshape(len(probs), -1).tolist(), probs, backoffs)}
    write_token_arpa(peer_arpa, ngrams, peer_symbol)

    order = sorted(range(len(arrays)), key=lambda i: arrays[i].shape[0], reverse=True)
    batches = []  # padded batches of 16, longest first, as the writer stage gets them
    for start in range(0, len(order), 16):
        indices = order[start : start + 16]
        lengths = torch.tensor([arrays[i].shape[0] for i in indices])
        padded = torch.zeros(len(indices), int(lengths.max()), vocab_size)
        for b, i in enumerate(indices):
            padded[b, : arrays[i].shape[0]] = arrays[i]
        batches.append((padded, lengths, indices))

    def ours(search, collapse=None, token_min_log_prob=-math.inf, threads=None):
        config = CtcBeamConfig(beam_size=args.domain_beam_size, lm_weight=args.domain_lm_weight,
                               insertion_bonus=args.domain_bonus, beam_threshold=args.domain_beam_threshold,
                               collapse_threshold=collapse, token_min_log_prob=token_min_log_prob,
                               cpu_threads=threads)
        decode = search(blank_id, config, lm)

        def run() -> list[list[int]]:
            tokens: list = [None] * len(arrays)
            for padded, lengths, indices in batches:
                for i, hypothesis in zip(indices, decode(padded, lengths).to_list()):
                    tokens[i] = hypothesis.tokens
            return tokens

        return run

    runs = {"torch beam": ours(CtcBeamSearch), "compiled": ours(CpuCtcBeamSearch),
            "compiled, collapse 0.9": ours(CpuCtcBeamSearch, 0.9),
            "compiled, peer's pruning": ours(CpuCtcBeamSearch, None, args.domain_token_min_log_prob)}
    if args.threads == 1:  # the thread pool's gain, side by side (its CPU time is that of both threads)
        runs["compiled, 2 threads"] = ours(CpuCtcBeamSearch, threads=2)
    if importlib.util.find_spec("ctc_beam_decoder") is not None:
        import ctc_beam_decoder

        labels = ["▁" + peer_symbol(i) for i in range(vocab_size - 1)] + [""]
        peer = ctc_beam_decoder.BeamSearchDecoder(labels, kenlm_model_path=str(peer_arpa),
                                                  alpha=args.domain_lm_weight, beta=args.domain_bonus)
        numpy_arrays = [array.numpy() for array in arrays]

        def run_peer() -> list[list[int]]:
            texts = [peer.decode_beams(array, beam_width=args.domain_beam_size,
                                       beam_prune_logp=-args.domain_beam_threshold,
                                       token_min_logp=args.domain_token_min_log_prob)[0][0]
                     for array in numpy_arrays]
            return [[ord(word) - 0x4E00 for word in text.split(" ") if word] for text in texts]

        runs["ctc-beam-decoder"] = run_peer
    # the CPU time of the process during each call too: on a shared machine, time slices lost to other work
    # count in the wall time but not here (with one thread, both measure the same work)
    cpu_times: dict[str, list[float]] = {name: [] for name in runs}

    def with_cpu_time(name, run):
        def timed_run():
            start = time.process_time()
            output = run()
            cpu_times[name].append(time.process_time() - start)
            return output

        return timed_run

    timed = timed_side_by_side({name: with_cpu_time(name, run) for name, run in runs.items()}, args.repeats, "cpu")
    cpu_seconds = {name: statistics.median(values[1:]) for name, values in cpu_times.items()}  # [0]: warm-up
    peer_seconds = timed["ctc-beam-decoder"][0] if "ctc-beam-decoder" in timed else None
    peer_cpu = cpu_seconds.get("ctc-beam-decoder")
    torch_tokens = timed["torch beam"][1]
    rows_out = {}
    for name, (seconds, tokens) in timed.items():
        texts = [model.tokenizer.ids_to_text([int(t) for t in sequence]) for sequence in tokens]
        measured = score(references, texts)
        rows_out[name] = {"ms_per_utterance": 1000 * seconds / len(arrays), "wer": measured.wer,
                          "cpu_ms_per_utterance": 1000 * cpu_seconds[name] / len(arrays),
                          "cpu_speedup_vs_peer": peer_cpu / cpu_seconds[name] if peer_cpu else None,
                          "cer": measured.cer, "speedup_vs_peer": peer_seconds / seconds if peer_seconds else None,
                          "same_tokens_as_torch_percent": 100 * sum(a == b for a, b in zip(tokens, torch_tokens))
                          / len(arrays)}
    return {"utterances": len(arrays), "audio_s": encoded.audio_s, "frames": sum(a.shape[0] for a in arrays),
            "lm_ngrams": len(ngrams), "rows": rows_out}


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    domain = None
    with tempfile.TemporaryDirectory() as folder:
        results = [bench_vocab(args, vocab_size, Path(folder)) for vocab_size in args.vocab_sizes]
        if args.domain:
            domain = bench_domain(args, Path(folder))

    if results:
        print(
            f"CTC decoding on peaky synthetic emissions: {args.utterances} utterances of "
            f"{int(args.frames * 0.8)}-{args.frames} frames, beam {args.beam_size}, LM weight {args.lm_weight}, "
            f"beam threshold {args.beam_threshold}, token_min_log_prob {args.token_min_log_prob}, our labels per "
            f"frame <= {args.max_labels_per_frame}, our batch {args.batch_size}, device {args.device}, "
            f"{torch.get_num_threads()} threads"
        )
        print("x = speed-up over our (torch) beam search without collapse; x peer = over ctc-beam-decoder; "
              "compiled = decoders/ctc/beam_cpu.py; TER against the sampled label sequences")
    for result in results:
        print(
            f"\nV={result['vocab_size']} (LM: {result['lm']}; "
            f"{100 * result['confident_blank_fraction']:.0f}% frames with p(blank) > 0.9)"
        )
        header = (
            f"{'decoder':<27} | {'frames kept':>11} | {'ms/utt':>8} | {'x':>6} | {'x peer':>6} | {'TER %':>6} | "
            f"{'same as beam':>12}"
        )
        print(header)
        print("-" * len(header))
        for name, row in result["rows"].items():
            peer = f"{row['speedup_vs_peer']:5.2f}x" if row["speedup_vs_peer"] else f"{'-':>6}"
            print(
                f"{name:<27} | {100 * row['frames_kept']:10.0f}% | {row['ms_per_utterance']:8.2f} | "
                f"{row['speedup_vs_beam']:5.2f}x | {peer} | {row['ter_percent']:6.2f} | "
                f"{row['same_text_as_beam_percent']:11.0f}%"
            )
    if domain is not None:
        print(
            f"\nThe bundled model's CTC head on samples/domain/test.json ({domain['utterances']} utterances, "
            f"{domain['audio_s']:.0f} s of audio, {domain['frames']} frames), the domain 6-gram LM "
            f"({domain['lm_ngrams']} n-grams): beam {args.domain_beam_size}, LM weight {args.domain_lm_weight}, "
            f"bonus {args.domain_bonus}, beam threshold {args.domain_beam_threshold}; ours prune no labels, the "
            f"peer token_min_logp {args.domain_token_min_log_prob}; batches of 16, {torch.get_num_threads()} threads, "
            f"median of {args.repeats} interleaved rounds"
        )
        print("ms/utt: wall time; cpu ms/utt: the process's CPU time (robust to other load with one thread)")
        header = (
            f"{'decoder':<24} | {'ms/utt':>8} | {'x peer':>6} | {'cpu ms/utt':>10} | {'x peer':>6} | {'WER %':>6} | "
            f"{'CER %':>6} | {'same as torch':>13}"
        )
        print(header)
        print("-" * len(header))
        for name, row in domain["rows"].items():
            peer = f"{row['speedup_vs_peer']:5.2f}x" if row["speedup_vs_peer"] else f"{'-':>6}"
            peer_cpu = f"{row['cpu_speedup_vs_peer']:5.2f}x" if row["cpu_speedup_vs_peer"] else f"{'-':>6}"
            print(
                f"{name:<24} | {row['ms_per_utterance']:8.2f} | {peer} | {row['cpu_ms_per_utterance']:10.2f} | "
                f"{peer_cpu} | {100 * row['wer']:6.2f} | {100 * row['cer']:6.2f} | "
                f"{row['same_tokens_as_torch_percent']:12.0f}%"
            )
    command = "python benchmarks/ctc.py " + " ".join(sys.argv[1:])
    print(f"\nreproduce: {command.strip()}")
    summary = {
        "benchmark": "ctc",
        "command": command.strip(),
        **machine(args.device),
        "config": {k: v for k, v in vars(args).items() if k != "quick"},
        "results": results,
        "domain": domain,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
