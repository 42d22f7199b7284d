"""Token-level n-gram LMs from word-level text: text -> SentencePiece tokens -> ARPA -> binary (what
`jobs/build_lm.py` runs, and `jobs/lm_bias.py` and the word-ARPA converter call).

Each line of text is a sentence. Tokens are written in NeMo's convention (token id i as `chr(i + 100)`).
The ARPA file comes from KenLM's `lmplz` (modified Kneser-Ney, `--discount_fallback` for small vocabularies)
when it is on PATH, else from `varikn` (pip; Kneser-Ney with growing and pruning). Either output is
normalized into an ARPA file that strict loaders (KenLM) accept: tab-separated, `<unk>` listed, and every
context that pruning dropped restored with its probability derived through backoff. The binary (see
`decoders/ngram/binary.py`) is what decoders load. `build_lm` reports n-gram counts and perplexity on held-out
text (given, or every k-th line of the text, held out of training).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from decoders.ngram import (
    KENLM_MISSING_UNK_LOG10,
    TOKEN_OFFSET,
    UNK_ID,
    NgramLm,
    add_missing_prefixes,
    open_text,
    read_arpa,
    write_arpa,
)
from pipeline.model import sentencepiece_model

MAX_ORDER = 10
VARIKN_UNK = "<UNK>"  # varikn's spelling; ARPA readers (KenLM, ours) expect <unk>


@dataclass
class BuildReport:
    tool: str
    order: int
    vocab_size: int
    ngram_counts: list[int]  # per order, after normalization
    restored_prefixes: int  # contexts that pruning had dropped
    num_states: int
    num_arcs: int
    training_sentences: int
    heldout_sentences: int
    heldout_tokens: int
    heldout_perplexity: float | None  # per token, </s> counted as a token
    seconds: float
    output: str
    arpa: str | None


def iter_sentences(paths: Sequence[str | Path]) -> Iterator[str]:
    for path in paths:
        with open_text(path) as lines:
            for line in lines:
                line = line.strip()
                if line:
                    yield line


class Tokenizer:
    """A SentencePiece model: sentence -> token ids, and ids -> NeMo's token characters."""

    def __init__(self, model_path: str | Path) -> None:
        import sentencepiece

        self.processor = sentencepiece.SentencePieceProcessor(model_proto=sentencepiece_model(model_path))
        self.vocab_size = self.processor.get_piece_size()

    def encode(self, sentence: str) -> list[int]:
        return self.processor.encode(sentence)

    @staticmethod
    def to_symbols(token_ids: list[int]) -> str:
        return " ".join(chr(token + TOKEN_OFFSET) for token in token_ids)


def find_lmplz() -> str | None:
    return shutil.which("lmplz")


def train_lmplz(tokens_path: Path, arpa_path: Path, order: int, work_dir: Path, memory: str = "20%") -> None:
    command = [find_lmplz() or "lmplz", "-o", str(order), "--discount_fallback", "-S", memory, "-T", str(work_dir),
               "--text", str(tokens_path), "--arpa", str(arpa_path)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"lmplz failed ({' '.join(command)}):\n{result.stderr[-3000:]}")


def train_varikn(tokens_path: Path, arpa_path: Path, order: int, work_dir: Path, scale: float) -> None:
    """varikn wants each sentence between <s> and </s>, and a file name, so it gets a tagged copy."""
    try:
        import varikn
    except ImportError as error:
        raise RuntimeError("neither lmplz (on PATH) nor varikn (pip install varikn) is available") from error
    tagged = work_dir / "tokens.tagged.txt"
    with open(tokens_path, encoding="utf-8") as source, open(tagged, "w", encoding="utf-8") as out:
        for line in source:
            out.write(f"<s> {line.rstrip()} </s>\n")
    log_path = work_dir / "varikn.log"
    try:
        with _native_output_to(log_path):  # varikn's C++ prints dozens of progress lines to stdout and stderr
            trainer = varikn.VarigramTrainer(True, False)  # modified Kneser-Ney with three discounts
            trainer.set_datacost_scale(scale)
            trainer.set_datacost_scale2(2 * scale)  # pruning at twice the growing scale, varikn's recommendation
            trainer.set_max_order(order)
            # file, hash size (0: default), drop counts below (0: none), most common words (-1: all),
            # optimization set ("": leave-one-out), history-clearing symbol, small memory, vocabulary ("": all)
            trainer.initialize(str(tagged), 0, 0, -1, "", "<s>", False, "")
            trainer.grow(1)
            trainer.write_file(str(arpa_path), True)
    except Exception as error:
        raise RuntimeError(f"varikn failed ({error}); its output:\n{log_path.read_text(errors='replace')[-3000:]}") \
            from error


@contextlib.contextmanager
def _native_output_to(path: Path) -> Iterator[None]:
    """Send what native code writes to file descriptors 1 and 2 into `path` (Python's own streams are flushed
    first, so nothing of ours is lost or reordered)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "wb") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def normalize_arpa(raw_path: Path, arpa_path: Path) -> int:
    """Rewrite an lmplz or varikn ARPA file into the strict form; returns how many contexts were restored."""
    renamed = raw_path.with_name(raw_path.name + ".renamed")
    with open_text(raw_path) as source, open(renamed, "w", encoding="utf-8") as out:
        for line in source:
            if VARIKN_UNK in line:
                parts = re.split(r"([ \t]+)", line.rstrip("\r\n"))  # keeps the separators
                line = "".join("<unk>" if part == VARIKN_UNK else part for part in parts) + "\n"
            out.write(line)
    arpa = read_arpa(renamed)
    renamed.unlink()
    ngrams: dict[tuple[int, ...], tuple[float, float]] = {}
    for tokens, probs, backoffs in zip(arpa.tokens, arpa.log10_probs, arpa.log10_backoffs):
        for row, prob, backoff in zip(tokens.tolist(), probs.tolist(), backoffs.tolist()):
            ngrams[tuple(row)] = (prob, backoff)
    if (UNK_ID,) not in ngrams:
        ngrams[(UNK_ID,)] = (KENLM_MISSING_UNK_LOG10, 0.0)
    restored = add_missing_prefixes(ngrams, ngrams[(UNK_ID,)][0])
    write_arpa(arpa_path, ngrams)
    return len(restored)


def heldout_perplexity(lm: NgramLm, sentences: list[list[int]], batch_size: int = 256) -> tuple[float | None, int]:
    """Per-token perplexity with </s> counted as a token (as KenLM and SRILM count it)."""
    total, count = 0.0, 0
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start : start + batch_size]
        width = max([len(s) for s in batch] + [1])
        tokens = torch.tensor([s + [0] * (width - len(s)) for s in batch], dtype=torch.long)
        lengths = torch.tensor([len(s) for s in batch])
        total += float(lm.score_sequences(tokens, lengths).sum())
        count += int(lengths.sum()) + len(batch)
    return (math.exp(-total / count) if count else None), count - len(sentences)


def build_lm(text: Sequence[str | Path], tokenizer_path: str | Path, output: str | Path, order: int = 6,
             heldout: Sequence[str | Path] = (), heldout_every: int = 0, arpa: str | Path | None = None,
             tool: str = "auto", varikn_scale: float = 0.001, work_dir: str | Path | None = None) -> BuildReport:
    """Text files -> binary LM at `output` (and the normalized ARPA at `arpa` if given)."""
    if not 1 <= order <= MAX_ORDER:
        raise ValueError(f"order must be in [1, {MAX_ORDER}], got {order}")
    if tool not in ("auto", "lmplz", "varikn"):
        raise ValueError(f"tool must be auto, lmplz or varikn, got {tool!r}")
    if tool == "auto":
        tool = "lmplz" if find_lmplz() else "varikn"
    if tool == "lmplz" and order < 2:
        raise ValueError("lmplz needs order >= 2")
    started = time.perf_counter()
    tokenizer = Tokenizer(tokenizer_path)
    for path in (output, arpa):  # their folders, made before the work rather than failing after it
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
        scratch = Path(scratch)
        tokens_path = scratch / "tokens.txt"
        heldout_sentences: list[list[int]] = [tokenizer.encode(line) for line in iter_sentences(heldout)]
        training = 0
        with open(tokens_path, "w", encoding="utf-8") as out:
            for index, line in enumerate(iter_sentences(text)):
                token_ids = tokenizer.encode(line)
                if heldout_every > 0 and index % heldout_every == heldout_every - 1:
                    heldout_sentences.append(token_ids)
                    continue
                out.write(tokenizer.to_symbols(token_ids) + "\n")
                training += 1
        if training == 0:
            raise ValueError("no training sentences: the text is empty or all held out")
        raw_arpa = scratch / "raw.arpa"
        if tool == "lmplz":
            train_lmplz(tokens_path, raw_arpa, order, scratch)
        else:
            train_varikn(tokens_path, raw_arpa, order, scratch, varikn_scale)
        arpa_path = Path(arpa) if arpa is not None else scratch / "lm.arpa"
        restored = normalize_arpa(raw_arpa, arpa_path)
        lm = NgramLm.from_arpa(arpa_path, tokenizer.vocab_size)
    lm.save(output)
    perplexity, heldout_tokens = heldout_perplexity(lm, heldout_sentences)
    return BuildReport(
        tool=tool, order=lm.max_order, vocab_size=tokenizer.vocab_size, ngram_counts=lm.ngram_counts,
        restored_prefixes=restored, num_states=lm.tensors.num_states, num_arcs=lm.tensors.num_arcs,
        training_sentences=training, heldout_sentences=len(heldout_sentences), heldout_tokens=heldout_tokens,
        heldout_perplexity=perplexity, seconds=round(time.perf_counter() - started, 2), output=str(output),
        arpa=str(arpa) if arpa is not None else None,
    )


def format_report(report: BuildReport) -> str:
    lines = [f"built {report.output} with {report.tool} in {report.seconds:.1f} s "
             f"(order {report.order}, vocabulary {report.vocab_size})", "", "| order | n-grams |", "| --- | --- |"]
    lines += [f"| {k} | {count} |" for k, count in enumerate(report.ngram_counts, start=1)]
    lines += ["", f"states {report.num_states}, arcs {report.num_arcs}, contexts restored after pruning "
              f"{report.restored_prefixes}, training sentences {report.training_sentences}"]
    if report.heldout_perplexity is not None:
        lines.append(f"held-out perplexity {report.heldout_perplexity:.3f} per token over "
                     f"{report.heldout_sentences} sentences ({report.heldout_tokens} tokens, </s> counted)")
    else:
        lines.append("no held-out text (pass --heldout or --heldout-every)")
    return "\n".join(lines)
