"""Domain text -> the text a model's tokenizer was trained on, for building its LM.

An LM built from text the tokenizer never saw in training (capitals for a lowercase model, digits it spells
out, punctuation it has no piece for) learns token sequences the model never emits, and helps nothing. The
tokenizer's own pieces say what its training text looked like, so the normalisation is read from them:

- case: text is lowercased when no piece holds an uppercase letter (and uppercased when none holds a lowercase
  one);
- numbers: where no piece holds a digit, numbers are spelled out in words (num2words, English: "42" -> "forty
  two", "3.5" -> "three point five", "1st" -> "first", "1,250" -> "one thousand, two hundred and fifty" without
  the commas and "and", as the model was taught "one thousand two hundred fifty"); where pieces hold digits,
  digits are kept;
- punctuation and symbols the pieces do not hold become spaces (an apostrophe inside a word is kept where the
  pieces hold one: "don't"); runs of spaces become one.

A character that none of the tokenizer's pieces holds (another script, an emoji) would be encoded as <unk>: a
line that still holds one after normalisation is dropped and counted (`NormalisedText.unencodable`), with its
first examples, and `check` refuses text where most lines are like that.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

from decoders.pieces import WORD_START

SHOWN_EXAMPLES = 3  # unencodable lines quoted in a message
MAX_UNENCODABLE_SHARE = 0.5  # past this share of lines with characters the tokenizer lacks, the text is refused
_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(st|nd|rd|th)?(?![\w])")
_SPACES = re.compile(r"\s+")


@dataclass
class NormalisedText:
    lines: list[str] = field(default_factory=list)
    read: int = 0  # non-blank lines read
    unencodable: int = 0  # lines dropped: characters no piece holds
    examples: list[str] = field(default_factory=list)  # of those, the first few, as (file, line): text

    @property
    def unencodable_share(self) -> float:
        return self.unencodable / self.read if self.read else 0.0


class TextNormaliser:
    """Normalises lines for one tokenizer, described by its pieces (SentencePiece pieces, `▁` for a word start)."""

    def __init__(self, pieces: Iterable[str]) -> None:
        characters = {char for piece in pieces if not _is_control(piece) for char in piece.replace(WORD_START, "")}
        self.alphabet = frozenset(characters)
        letters = [c for c in characters if c.isalpha()]
        self.lowercase = bool(letters) and not any(c.isupper() for c in letters)
        self.uppercase = bool(letters) and not any(c.islower() for c in letters)
        self.spell_numbers = not any(c.isdigit() for c in characters)
        self.apostrophe = "'" in characters

    @classmethod
    def for_model(cls, nemo_path: str) -> TextNormaliser:
        """The normaliser of a `.nemo` file's SentencePiece tokenizer (read without NeMo)."""
        import sentencepiece

        from pipeline.model import sentencepiece_model

        processor = sentencepiece.SentencePieceProcessor(model_proto=sentencepiece_model(nemo_path))
        return cls(processor.id_to_piece(i) for i in range(processor.get_piece_size()))

    def describe(self) -> str:
        case = "lowercased" if self.lowercase else "uppercased" if self.uppercase else "case kept"
        numbers = "numbers spelled out" if self.spell_numbers else "digits kept"
        return f"{case}, {numbers}, punctuation the tokenizer lacks removed"

    def __call__(self, line: str) -> str:
        """One line of text, normalised (may be empty)."""
        text = unicodedata.normalize("NFKC", line)
        text = text.replace("\u2019", "'").replace("\u2018", "'")
        if self.spell_numbers:
            text = _NUMBER.sub(_spelled, text)
        if self.lowercase:
            text = text.lower()
        elif self.uppercase:
            text = text.upper()
        kept = []
        for char in text:
            if char in self.alphabet or char.isspace():
                kept.append(char)
            elif char == "'" and self.apostrophe:
                kept.append(char)
            elif unicodedata.category(char)[0] in "PSZ" or (char == "'" and not self.apostrophe):
                kept.append(" ")  # punctuation and symbols the tokenizer has no piece for
            else:
                kept.append(char)  # another script: left for `encodable` to find
        return _SPACES.sub(" ", "".join(kept)).strip()

    def encodable(self, text: str) -> bool:
        return all(char in self.alphabet or char == " " for char in text)

    def normalise(self, sources: Iterable[tuple[str, Iterable[str]]]) -> NormalisedText:
        """(name, lines) of each text file -> the normalised, encodable, non-empty lines and what was dropped."""
        result = NormalisedText()
        for name, lines in sources:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                result.read += 1
                text = self(line)
                if not text:
                    continue
                if not self.encodable(text):
                    result.unencodable += 1
                    if len(result.examples) < SHOWN_EXAMPLES:
                        result.examples.append(f"{name}, line {number}: {line.strip()[:80]!r}")
                    continue
                result.lines.append(text)
        return result


def check(text: NormalisedText, names: list[str]) -> None:
    """Refuse (ValueError naming the files) text with no usable line, or mostly lines the tokenizer cannot
    encode."""
    if text.read == 0:
        raise ValueError(f"no text in {', '.join(names)}: the files are empty")
    if not text.lines or text.unencodable_share > MAX_UNENCODABLE_SHARE:
        raise ValueError(
            f"{text.unencodable} of {text.read} lines of {', '.join(names)} hold characters the model's tokenizer "
            f"cannot encode (another script or alphabet?), e.g. {'; '.join(text.examples)}")


def _is_control(piece: str) -> bool:
    return (piece.startswith("<") and piece.endswith(">")) or (piece.startswith("[") and piece.endswith("]"))


def _spelled(match: re.Match[str]) -> str:
    from num2words import num2words

    whole, fraction, suffix = match.group(1).replace(",", ""), match.group(2), match.group(3)
    if suffix and not fraction:
        words = num2words(int(whole), to="ordinal")
    else:
        words = num2words(int(whole))
        if fraction:
            words += " point " + " ".join(num2words(int(digit)) for digit in fraction)
    return " " + words.replace("-", " ").replace(",", "").replace(" and ", " ") + " "
