"""`--lm` with a word-level ARPA file: converted to a token-level LM for the model's tokenizer, and cached.

The conversion was chosen by measurement (`benchmarks/word_lm.py`; measured in docs/benchmarks.md, "Word-level
ARPA -> token LM", and read in docs/lm_bias.md): sentences drawn from the word LM as its back-off formula defines it
(`decoders/ngram/word_lm.py::sample_word_sentences`), normalised and tokenized as the tokenizer's training text
was, and a token LM of order 6 estimated from them by the builder of `pipeline/lm/build.py` (KenLM's lmplz if on
PATH, else varikn: modified Kneser-Ney). It matched the held-out perplexity and the domain WER of a token LM
estimated from the word LM's own training text, where spelling every word n-gram out in tokens (`spell_word_lm`,
the other candidate, kept for the benchmark) lost on both, as the word LM itself does on names it never saw.

The converted LM is written to `<cache_dir>/lms/word_lms/<key>.lm` (`pipeline/io/cache.py`), the key being the
sha256 of the word ARPA's bytes, the tokenizer's identity (the sha256 of its SentencePiece model), the conversion,
its version and the token order; a later load with the same reads the binary instead of converting again.
Concurrent loads on a node convert once (a file lock) and never read a partial file (an atomic rename).

A drawn sentence is normalised as the tokenizer's training text was (`pipeline/lm/text.py`: a word-level ARPA in
capitals serves a lowercase model); a sentence with a word the tokenizer can only spell with `<unk>` is left out.
For a cased, punctuated tokenizer (parakeet's), the same rules keep the word LM's case and punctuation, and write
its punctuation words as the model writes them ("Paris , France ." -> "Paris, France.": the tokenizer spells the
two differently); a word LM written all in one case (a lower-case LM, or LibriSpeech's in capitals) has lost its
case, so each drawn sentence is lowercased and starts with a capital, as the model writes sentences (the capitals of
names are not known). A word LM without punctuation leaves the model's punctuation tokens unseen by the token LM:
`convert_word_arpa`'s report says so (`punctuated`), and docs/lm_bias.md says what that costs.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from decoders.ngram import NgramLm

Conversion = Literal["sample", "spell"]
CONVERSION: Conversion = "sample"  # the measured choice (module docstring)
CONVERSION_VERSION = 2  # bump when a conversion's output changes: cached conversions are then made again
# 2: cased tokenizers: one-case word LMs recased, punctuation written without the space before it
TOKEN_ORDER = 6  # order of the converted token LM (jobs/build_lm.py's default for token LMs)
# sentences drawn: ten per word n-gram, within these bounds (108,000 for the domain LM of the benchmark, whose
# 12,620 n-grams come from 5,400 lines: 20 drawn per line of text matched a token LM of that text)
MIN_SENTENCES, SENTENCES_PER_NGRAM, MAX_SENTENCES = 100_000, 10, 1_000_000
SEED = 0


def sentences_to_draw(num_ngrams: int) -> int:
    return min(max(SENTENCES_PER_NGRAM * num_ngrams, MIN_SENTENCES), MAX_SENTENCES)


@dataclass(frozen=True)
class WordSpeller:
    """A word -> the model's token ids (None: the tokenizer cannot spell it without `<unk>`), and `identity`,
    which names the tokenizer in cache keys."""

    processor: Any  # sentencepiece.SentencePieceProcessor
    identity: str

    def __post_init__(self) -> None:
        from pipeline.lm.text import TextNormaliser

        pieces = [self.processor.id_to_piece(i) for i in range(self.processor.get_piece_size())]
        object.__setattr__(self, "normalise", TextNormaliser(pieces))
        object.__setattr__(self, "_unk_id", self.processor.unk_id())

    def encodable(self, text: str) -> bool:
        return self.normalise.encodable(text)

    def __call__(self, word: str) -> list[int] | None:
        text = self.normalise(word)
        if not text or not self.encodable(text):
            return None
        token_ids = self.processor.encode(text)
        return None if not token_ids or self._unk_id in token_ids else token_ids


def model_speller(tokenizer: Any) -> WordSpeller:
    """The speller of a model's tokenizer: `AsrModel.tokenizer` (NeMo's), `ModelLayout.tokenizer`, a
    SentencePiece processor, or the path of a `.nemo` file or SentencePiece `.model`."""
    import sentencepiece

    if isinstance(tokenizer, (str, Path)):
        from pipeline.model import sentencepiece_model

        processor = sentencepiece.SentencePieceProcessor(model_proto=sentencepiece_model(tokenizer))
    elif isinstance(tokenizer, sentencepiece.SentencePieceProcessor):
        processor = tokenizer
    else:  # ModelLayout's SentencePieceText holds `processor`; NeMo's SentencePieceTokenizer holds `tokenizer`
        inner = getattr(tokenizer, "processor", None) or getattr(getattr(tokenizer, "tokenizer", None), "tokenizer",
                                                                   None)
        if not isinstance(inner, sentencepiece.SentencePieceProcessor):
            raise ValueError(f"a word-level ARPA needs the model's SentencePiece tokenizer to spell its words; "
                             f"this model's tokenizer is {type(tokenizer).__name__}")
        processor = inner
    identity = hashlib.sha256(processor.serialized_model_proto()).hexdigest()
    return WordSpeller(processor, identity)


def conversion_key(arpa_sha256: str, speller: WordSpeller, order: int = TOKEN_ORDER,
                   conversion: Conversion = CONVERSION) -> str:
    return hashlib.sha256(f"{arpa_sha256}\n{speller.identity}\n{conversion}-{CONVERSION_VERSION}\n{order}"
                          .encode()).hexdigest()


def convert_word_arpa(path: str | Path, speller: WordSpeller, vocab_size: int, output: str | Path,
                      order: int = TOKEN_ORDER, conversion: Conversion = CONVERSION, sentences: int | None = None,
                      work_dir: str | Path | None = None) -> dict[str, Any]:
    """A word-level ARPA file -> the binary of a token-level LM for labels 0 .. vocab_size - 1 at `output`, by
    `conversion` ("sample": `sentences` drawn, by default `sentences_to_draw`; "spell"). Returns what it did."""
    from decoders.ngram import read_word_arpa, sample_word_sentences, spell_word_lm, write_arpa

    word_lm = read_word_arpa(path)
    recase = speller.normalise.one_case(word_lm.words)  # a cased tokenizer, a word LM written in one case
    report: dict[str, Any] = {"conversion": conversion, "word_ngrams": len(word_lm.ngrams), "recased": recase,
                              "punctuated": False}
    with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
        scratch = Path(scratch)
        if conversion == "spell":
            token_arpa = scratch / "tokens.arpa"
            write_arpa(token_arpa, spell_word_lm(word_lm, speller, order=order))
            lm = NgramLm.from_arpa(token_arpa, vocab_size)
        elif conversion == "sample":
            from pipeline.lm.build import build_lm  # the builder users build token LMs with

            count = sentences if sentences is not None else sentences_to_draw(len(word_lm.ngrams))
            text, kept = scratch / "sampled.txt", 0
            punctuation = set(speller.normalise.punctuation)
            with open(text, "w", encoding="utf-8") as out:
                for words in sample_word_sentences(word_lm, count, seed=SEED):
                    sentence = speller.normalise(" ".join(words), recase=recase)
                    if sentence and speller.encodable(sentence):
                        out.write(sentence + "\n")
                        kept += 1
                        report["punctuated"] = report["punctuated"] or not punctuation.isdisjoint(sentence)
            if kept == 0:
                raise ValueError(f"{path}: no sentence drawn from the word LM can be spelled by the model's "
                                 "tokenizer")
            tokenizer = scratch / "tokenizer.model"
            tokenizer.write_bytes(speller.processor.serialized_model_proto())
            build_lm([text], tokenizer, scratch / "tokens.lm", order=order, work_dir=scratch)
            lm = NgramLm.load(scratch / "tokens.lm", verify=False)
            report.update(sentences=count, sentences_kept=kept)
        else:
            raise ValueError(f"conversion must be sample or spell, got {conversion!r}")
        if lm.vocab_size != vocab_size:
            raise ValueError(f"{path}: the model's tokenizer has {lm.vocab_size} pieces but its head {vocab_size} "
                             "labels")
        lm.save(output)
    report["ngrams"] = sum(lm.ngram_counts)
    return report


def load_word_arpa(path: str | Path, speller: WordSpeller, vocab_size: int, cache_dir: str | Path,
                   order: int = TOKEN_ORDER) -> NgramLm:
    """The token-level LM of the word-level ARPA at a local `path`: memory-mapped from the cache under the root
    `cache_dir` where it was converted before, else converted now (`CONVERSION`) and cached."""
    from pipeline.io import cached_sha256, file_lock, lms_dir, word_lms_dir

    folder = word_lms_dir(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    key = conversion_key(cached_sha256(path, lms_dir(cache_dir)), speller, order)  # hashed once per version
    target = folder / f"{key}.lm"
    if not target.is_file():
        with file_lock(folder / f"{key}.lock"):
            if not target.is_file():  # else converted by another process while this one waited
                with tempfile.NamedTemporaryFile(dir=folder, delete=False, prefix=".convert-", suffix=".lm") as tmp:
                    pass
                try:
                    convert_word_arpa(path, speller, vocab_size, tmp.name, order, work_dir=folder)
                    os.replace(tmp.name, target)
                except BaseException:
                    Path(tmp.name).unlink(missing_ok=True)
                    raise
    return NgramLm.load(target)
