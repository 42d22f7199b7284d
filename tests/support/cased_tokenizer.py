"""A small cased, punctuated SentencePiece tokenizer (as parakeet's writes: capitals, digits, `, . ? !`), trained on
the spot, for the tests of every job on such a model (tests/pipeline/lm/test_cased.py, tests/jobs/test_cased_model.py).

`train_cased_tokenizer` trains it with NeMo's `create_spt_model(..., do_lower_case=False)` where `nemo` is asked
(the folder then has NeMo's layout: tokenizer.model, tokenizer.vocab, vocab.txt), or with the same trainer
options through sentencepiece alone (no NeMo import: seconds, not a minute).
"""

from __future__ import annotations

from pathlib import Path

# cased and punctuated, digits included; no word starts with "Q" or "Z" (a capital the tokenizer lacks)
CASED_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "She sells sea shells by the sea shore, near Paris.",
    "Call Rachel Perkins at 5 o'clock, please!",
    "Is it raining in London today?",
    "NASA launched 3 rockets from Florida in 2021.",
    "Actions speak louder than words, don't they?",
    "Every cloud has a silver lining, said Uncle Ben.",
    "Where there is a will, there is a way.",
    "Birds of a feather flock together in Oslo.",
    "An apple a day keeps the doctor away.",
    "Better late than never, said Mr. Smith.",
    "All that glitters is not gold, Jane.",
    "Kevin, Victor and Yvonne went to Hamburg by train.",
    "Gary met Irene at the Bank of America in New York.",
    "Where is Wendy? Dinner is at 7.",
    "Xavier, turn on the lights in the kitchen.",
]


def train_cased_tokenizer(out_dir: Path, vocab_size: int = 128, nemo: bool = False) -> Path:
    """The cased tokenizer in `out_dir` (tokenizer.model, tokenizer.vocab, and with `nemo` vocab.txt); returns
    the folder."""
    out_dir.mkdir(parents=True, exist_ok=True)
    text_file = out_dir / "text.txt"
    text_file.write_text("\n".join(CASED_SENTENCES * 4) + "\n", encoding="utf-8")
    if nemo:
        from nemo.collections.common.tokenizers.sentencepiece_tokenizer import create_spt_model

        create_spt_model(str(text_file), vocab_size, sample_size=-1, do_lower_case=False, tokenizer_type="bpe",
                         output_dir=str(out_dir))
        return out_dir
    import sentencepiece

    # create_spt_model's options (do_lower_case=False: no case-folding rule), without its shuffling
    sentencepiece.SentencePieceTrainer.Train(
        f"--input={text_file} --model_prefix={out_dir}/tokenizer --vocab_size={vocab_size} "
        "--hard_vocab_limit=false --model_type=bpe --character_coverage=1.0 --bos_id=-1 --eos_id=-1 "
        "--remove_extra_whitespaces=false --minloglevel=2")
    return out_dir


def cased_processor(out_dir: Path, vocab_size: int = 128):
    """A SentencePiece processor of the cased tokenizer, trained into `out_dir`."""
    import sentencepiece

    folder = train_cased_tokenizer(out_dir, vocab_size)
    return sentencepiece.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
