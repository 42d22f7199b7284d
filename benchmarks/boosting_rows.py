"""What per-utterance phrase lists (a manifest's `phrases`) cost and give, against job-wide boosting (`--phrases`),
on the bundled model and the bundled domain test set.

Each test utterance lists `--phrases-per-row` contact names: the names its reference addresses (as a contact list
per caller would hold them) and other names of the domain's contact book (`benchmarks/boosting.py`), drawn per
utterance; job-wide boosting boosts the whole book (236 names) for every utterance. Runs, on the same encoder
output (computed once, in batches of `--batch-size`, not timed), per strategy:
- plain: no boosting;
- job: the contact book, job-wide;
- rows: every utterance with its own list, as the ASR stage decodes a batch (`pipeline/decoding/row_phrases.py`: the
  batch's model built from cached trees, a decoder of the batch, the decode);
- half: every other utterance with its own list (mixed batches: decoded in two calls).
Times are the whole test set's decode, runs interleaved (`benchmarks/_timing.py`). Building a batch's model is also
timed apart: cold (a new actor: tokenizing every phrase and building every list's tree) and warm (the lists'
trees cached, as when lists recur: only the union of the batch's trees). WER (jiwer) and the key-phrase F of the
contact names (as `benchmarks/boosting.py` counts them) for plain, job and rows.

    python benchmarks/boosting_rows.py                 # greedy, alsd, ctc_beam; 10 names a row; 3 rounds
    python benchmarks/boosting_rows.py --quick         # one timed round

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import torch  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from benchmarks._timing import interleaved_ms, machine  # noqa: E402
from benchmarks.boosting import contact_names, key_phrase_counts, key_phrase_scores, read_set  # noqa: E402
from decoders.boosting import PhraseBoosting  # noqa: E402
from pipeline.config import BUNDLED_MODEL  # noqa: E402
from pipeline.decoding import DecodingConfig, RowPhrases, compact_ctc_log_probs, phrase_set, plan_decoding  # noqa: E402  # noqa: E402
from pipeline.lm import score  # noqa: E402
from pipeline.model import load_asr_model  # noqa: E402


def row_lists(references: list[str], contacts: list[str], size: int, seed: int = 0) -> list[list[str]]:
    """Each utterance's list: the contact names its reference holds, then other names of the book, `size` in all."""
    lists = []
    for index, reference in enumerate(references):
        own = [name for name in contacts if f" {name} " in f" {reference} "]
        others = [name for name in contacts if name not in own]
        random.Random(seed + index).shuffle(others)
        lists.append((own + others)[: max(size, len(own))])
    return lists


class Runs:
    """The decodes of one strategy over the encoded test set, each returning the texts (row order)."""

    def __init__(self, model, strategy: str, beam_size: int, encoded, contacts: list[str], lists) -> None:
        self.model, self.encoded = model, encoded
        self.plan = plan_decoding(model.facts, DecodingConfig(strategy=strategy, beam_size=beam_size))
        self.job_plan = plan_decoding(model.facts, DecodingConfig(strategy=strategy, beam_size=beam_size,
                                                                  phrases_uri="contact book"))
        self.row_phrases = RowPhrases(self.plan, model)
        clock = time.perf_counter()
        self.book = self.tree(contacts)
        self.book_ms = (time.perf_counter() - clock) * 1000
        self.plain = self.searcher(self.plan, None)
        self.job = self.searcher(self.job_plan, self.book)
        self.sets = [phrase_set([{"text": name, "weight": None} for name in names]) for names in lists]
        for phrases in self.sets:
            assert self.row_phrases.problem(phrases) is None

    def tree(self, phrases: list[str]) -> PhraseBoosting:
        """A phrase list's tree, tokenized as a `--phrases` list is."""
        sequences = [spelling for phrase in phrases for spelling in self.row_phrases.tokenize(phrase)]
        return PhraseBoosting.from_token_sequences(sequences, self.row_phrases.vocab_size, num_phrases=len(phrases))

    def searcher(self, plan, boosting):
        """The plan's decoder (or writer search): encoder output [B, T, D], lengths [B] -> hypotheses."""
        fused = plan.fusion_model(None, boosting)
        if plan.writer_searches:
            search = plan.build_writer_search(self.model, fused)
            return lambda output, lengths: search(compact_ctc_log_probs(self.model, output, lengths, plan))
        decode = plan.build_decoder(self.model, fused)
        return lambda output, lengths: decode(output, lengths).to_list()

    def texts(self, decode_batch) -> list[str]:
        texts = [""] * len(self.encoded.references)
        with torch.no_grad():
            for output, lengths, rows in self.encoded.batches:
                for row, hypothesis in zip(rows, decode_batch(output, lengths, rows)):
                    texts[row] = self.model.tokenizer.ids_to_text([int(t) for t in hypothesis.tokens])
        return texts

    def without_lists(self, decode):
        """The decode of every row with `decode` (plain, or the job's list)."""
        return lambda: self.texts(lambda output, lengths, rows: decode(output, lengths))

    def with_lists(self, every: int):
        """The decode of rows `every`-th of which list their phrases, as the stage decodes them."""
        def decode_batch(output, lengths, rows):
            sets = [self.sets[row] if row % every == 0 else None for row in rows]
            if self.plan.writer_searches:
                compact = compact_ctc_log_probs(self.model, output, lengths, self.plan)
                return self.row_phrases.search(self.model, self._plain_search, compact, sets)
            return self.row_phrases.decode(self.model, self._plain_decode, output, lengths, sets)
        return lambda: self.texts(decode_batch)

    @property
    def _plain_search(self):
        if not hasattr(self, "_search"):
            self._search = self.plan.build_writer_search(self.model, None)
        return self._search

    @property
    def _plain_decode(self):
        if not hasattr(self, "_decode"):
            self._decode = self.plan.build_decoder(self.model, None)
        return self._decode

    def build_ms(self) -> tuple[float, float]:
        """Mean ms to build a batch's model (every row with its list): cold, in a new actor (tokenizing, trees,
        union), then warm, the same batches again (the trees cached: the union)."""
        row_phrases = RowPhrases(self.plan, self.model)
        times = []
        for _ in range(2):
            started = time.perf_counter()
            for _, _, rows in self.encoded.batches:
                row_phrases.fused_model([self.sets[row] for row in rows])
            times.append((time.perf_counter() - started) * 1000 / len(self.encoded.batches))
        return times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(BUNDLED_MODEL))
    parser.add_argument("--domain", default=str(REPOSITORY / "samples" / "domain"))
    parser.add_argument("--strategies", nargs="+", default=["greedy", "alsd", "ctc_beam"])
    parser.add_argument("--phrases-per-row", type=int, default=10)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, help="timed rounds (default: 3, --quick 1)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    repeats = args.repeats or (1 if args.quick else 3)
    domain = Path(args.domain)

    model = load_asr_model(args.model)
    encoded = read_set(domain / "test.json", args.batch_size, model)
    dev = [json.loads(line)["text"] for line in (domain / "dev.json").read_text().splitlines() if line.strip()]
    contacts = contact_names((domain / "lm_text.txt").read_text().splitlines() + dev + encoded.references)
    lists = row_lists(encoded.references, contacts, args.phrases_per_row)
    results = []
    for strategy in args.strategies:
        runs = Runs(model, strategy, args.beam_size, encoded, contacts, lists)
        cold_ms, warm_ms = runs.build_ms()
        times, texts = interleaved_ms({
            "plain": runs.without_lists(runs.plain),
            "job": runs.without_lists(runs.job),
            "rows": runs.with_lists(1),
            "half": runs.with_lists(2),
        }, repeats)
        median = {name: sorted(values)[len(values) // 2] for name, values in times.items()}
        accuracy = {name: {"wer": score(encoded.references, texts[name]).wer,
                           **key_phrase_scores(key_phrase_counts(encoded.references, texts[name], contacts))}
                    for name in ("plain", "job", "rows")}
        results.append({"strategy": strategy, "decode_ms": median, "build_ms_per_batch": {"cold": cold_ms,
                                                                                          "warm": warm_ms},
                        "book_ms": runs.book_ms, "accuracy": accuracy})

    print(f"test set: {len(encoded.references)} utterances in {len(encoded.batches)} batches of up to "
          f"{args.batch_size}; {args.phrases_per_row} names a row (its own and others of the book), the book "
          f"{len(contacts)} names; median of {repeats} round(s), ms for the whole set's decode")
    print("| strategy | plain | job (book) | rows | half the rows | batch build cold / warm | WER plain / job / rows "
          "| key-phrase F plain / job / rows |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        ms, a = r["decode_ms"], r["accuracy"]
        print(f"| {r['strategy']} | {ms['plain']:.0f} | {ms['job']:.0f} (x{ms['job'] / ms['plain']:.2f}) | "
              f"{ms['rows']:.0f} (x{ms['rows'] / ms['plain']:.2f}) | "
              f"{ms['half']:.0f} (x{ms['half'] / ms['plain']:.2f}) "
              f"| {r['build_ms_per_batch']['cold']:.0f} / {r['build_ms_per_batch']['warm']:.1f} ms | "
              f"{a['plain']['wer']:.1%} / {a['job']['wer']:.1%} / {a['rows']['wer']:.1%} | "
              f"{a['plain']['f']:.2f} / {a['job']['f']:.2f} / {a['rows']['f']:.2f} |")
    print("python benchmarks/boosting_rows.py " + " ".join(sys.argv[1:]))
    print(json.dumps({"results": results, "repeats": repeats, "phrases_per_row": args.phrases_per_row,
                      "batch_size": args.batch_size, "contacts": len(contacts), "machine": machine()}))


if __name__ == "__main__":
    main()
