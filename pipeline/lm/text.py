"""Domain text -> the text a model's tokenizer was trained on, for building its LM; and any text -> its plain form
(`plain_text`), in which WER and CER are normalised.

An LM built from text the tokenizer never saw in training (capitals for a lowercase model, digits it spells
out, punctuation it has no piece for) learns token sequences the model never emits, and helps nothing. The
tokenizer's own pieces say what its training text looked like, so the normalisation is read from them
(`TextNormaliser.rules` says which apply, in words, for reports):

- case: text is lowercased when no piece holds an uppercase letter (and uppercased when none holds a lowercase
  one); a cased tokenizer (parakeet's: capitals and punctuation) keeps the case as written, except in a source
  (a text file, a word LM) written all in one case, which has lost it: that is lowercased and each line starts
  with a capital, as the model writes sentences (names stay lowercase: their capitals are not known);
- numbers: where no piece holds a digit, numbers are spelled out in words (num2words, English: "42" -> "forty
  two", "3.5" -> "three point five", "1st" -> "first", "1,250" -> "one thousand, two hundred and fifty" without
  the commas and "and", as the model was taught "one thousand two hundred fifty"); where pieces hold digits,
  digits are kept;
- punctuation and symbols the pieces hold are kept, written as text writes them: no space before `, . ; : ! ? )
  ] }` nor after `( [ {` (a word LM of tokenized text has "Paris , France ." where the model writes "Paris,
  France."; the tokenizer spells the two differently); those the pieces do not hold become spaces (an apostrophe
  inside a word is kept where the pieces hold one: "don't"); runs of spaces become one.

A character that none of the tokenizer's pieces holds (another script, an emoji) would be encoded as <unk>: a
line that still holds one after normalisation is dropped and counted (`NormalisedText.unencodable`), with its
first examples, and `check` refuses text where most lines are like that.

`plain_text` is the other direction, for scoring: a transcript or reference lowercased, numbers spelled out,
punctuation and symbols removed (an apostrophe joins: "don't" -> "dont"; a hyphen separates), so that a cased,
punctuated model is scored against lower-case references, and "42" against "forty two", by the words alone.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

from decoders.pieces import WORD_START

SHOWN_EXAMPLES = 3  # unencodable lines quoted in a message
MAX_UNENCODABLE_SHARE = 0.5  # past this share of lines with characters the tokenizer lacks, the text is refused
CLOSING = ",.;:!?)]}"  # written with no space before them
OPENING = "([{"  # written with no space after them
_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(st|nd|rd|th)?(?![\w])")
_SPACES = re.compile(r"\s+")
_SPACE_BEFORE = re.compile(r" +(?=[" + re.escape(CLOSING) + "])")
_SPACE_AFTER = re.compile(r"(?<=[" + re.escape(OPENING) + "]) +")


@dataclass
class NormalisedText:
    lines: list[str] = field(default_factory=list)
    read: int = 0  # non-blank lines read
    unencodable: int = 0  # lines dropped: characters no piece holds
    examples: list[str] = field(default_factory=list)  # of those, the first few, as (file, line): text
    recased: list[str] = field(default_factory=list)  # sources written in one case, recased for a cased tokenizer
    punctuated: bool = False  # whether any line kept a punctuation mark the tokenizer writes

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
        self.cased = bool(letters) and not self.lowercase and not self.uppercase
        self.spell_numbers = not any(c.isdigit() for c in characters)
        self.apostrophe = "'" in characters
        # punctuation and symbols the tokenizer writes (the apostrophe apart: it belongs to words)
        self.punctuation = "".join(sorted(c for c in characters if c != "'" and unicodedata.category(c)[0] in "PS"))

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
        punctuation = (f"punctuation {' '.join(self.punctuation)} kept, other removed" if self.punctuation
                       else "punctuation removed")
        return f"{case}, {numbers}, {punctuation}"

    def rules(self) -> list[str]:
        """The rules this normaliser applies, one sentence each, as read from the tokenizer (for reports)."""
        if self.lowercase:
            case = "lowercased (no piece of the tokenizer holds a capital)"
        elif self.uppercase:
            case = "uppercased (no piece of the tokenizer holds a lowercase letter)"
        elif self.cased:
            case = ("case kept (the tokenizer writes capitals); a file written all in one case is lowercased and "
                    "each line starts with a capital, as the model writes sentences")
        else:
            case = "no letters in the tokenizer: case left as written"
        numbers = ("numbers spelled out in words (no piece holds a digit)" if self.spell_numbers
                   else "digits kept (the tokenizer writes digits)")
        if self.punctuation:
            closing, opening = (" ".join(c for c in marks if c in self.alphabet) for marks in (CLOSING, OPENING))
            spacing = ", ".join(([f"no space before {closing}"] if closing else [])
                                + ([f"none after {opening}"] if opening else []))
            punctuation = (f"punctuation the tokenizer writes kept ({' '.join(self.punctuation)})"
                           + (f", written as text writes it ({spacing})" if spacing else "")
                           + "; other punctuation and symbols become spaces")
        else:
            punctuation = "punctuation and symbols become spaces (the tokenizer has none)"
        apostrophe = ("an apostrophe inside a word is kept" if self.apostrophe
                      else "apostrophes become spaces")
        return [case, numbers, f"{punctuation}; {apostrophe}",
                "lines holding characters no piece holds (another script) are dropped and counted"]

    def one_case(self, lines: Iterable[str]) -> bool:
        """Whether text (a file's lines, a word LM's words) has lost its case for this tokenizer: the tokenizer is
        cased and the text's letters are all lowercase or all uppercase."""
        if not self.cased:
            return False
        has_lower = has_upper = False
        for line in lines:
            has_lower = has_lower or any(c.islower() for c in line)
            has_upper = has_upper or any(c.isupper() for c in line)
            if has_lower and has_upper:
                return False
        return has_lower or has_upper

    def __call__(self, line: str, recase: bool = False) -> str:
        """One line of text, normalised (may be empty); `recase`: the line comes from text written in one case
        (`one_case`), so it is lowercased and starts with a capital."""
        text = unicodedata.normalize("NFKC", line)
        text = text.replace("\u2019", "'").replace("\u2018", "'")
        if self.spell_numbers:
            text = spell_numbers(text)
        if self.lowercase:
            text = text.lower()
        elif self.uppercase:
            text = text.upper()
        elif recase:
            text = text.lower()
        kept = []
        for char in text:
            if char in self.alphabet or char.isspace():
                kept.append(char)
            elif unicodedata.category(char)[0] in "PSZ" or char == "'":
                kept.append(" ")  # punctuation and symbols the tokenizer has no piece for
            else:
                kept.append(char)  # another script: left for `encodable` to find
        text = _SPACES.sub(" ", "".join(kept)).strip()
        if self.punctuation:
            text = _SPACE_AFTER.sub("", _SPACE_BEFORE.sub("", text))
        if recase:
            text = self.sentence_start(text)
        return text

    def sentence_start(self, text: str) -> str:
        """`text` with its first letter a capital where it starts with a word (not a number), and the tokenizer
        has that capital."""
        for index, char in enumerate(text):
            if char.isalnum():
                if char.isalpha() and char.upper() in self.alphabet and len(char.upper()) == 1:
                    return text[:index] + char.upper() + text[index + 1:]
                break
        return text

    def encodable(self, text: str) -> bool:
        return all(char in self.alphabet or char == " " for char in text)

    def normalise(self, sources: Iterable[tuple[str, Iterable[str]]]) -> NormalisedText:
        """(name, lines) of each text file -> the normalised, encodable, non-empty lines and what was dropped; a
        file written in one case, for a cased tokenizer, recased (`one_case`)."""
        result = NormalisedText()
        for name, lines in sources:
            lines = list(lines)
            recase = self.one_case(lines)
            if recase:
                result.recased.append(name)
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                result.read += 1
                text = self(line, recase=recase)
                if not text:
                    continue
                if not self.encodable(text):
                    result.unencodable += 1
                    if len(result.examples) < SHOWN_EXAMPLES:
                        result.examples.append(f"{name}, line {number}: {line.strip()[:80]!r}")
                    continue
                result.punctuated = result.punctuated or any(c in self.punctuation for c in text)
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


def spell_numbers(text: str) -> str:
    """Numbers in `text` spelled out in English words, as the module docstring says ("1,250" -> "one thousand
    two hundred fifty"); the rest unchanged."""
    return _NUMBER.sub(_spelled, text)


PLAIN_TEXT_RULES = ("lowercased, numbers spelled out in words, punctuation and symbols removed (an apostrophe joins, "
                    "\"don't\" -> \"dont\"; a hyphen separates)")


def plain_text(text: str) -> str:
    """`text` as WER and CER are normalised (`PLAIN_TEXT_RULES`): the words alone, whatever the case and
    punctuation a model or a reference writes."""
    text = unicodedata.normalize("NFKC", text or "").replace("\u2019", "'").replace("\u2018", "'")
    text = spell_numbers(text).casefold()
    kept = []
    for char in text:
        if char == "'":
            continue
        kept.append(" " if unicodedata.category(char)[0] in "PSZC" else char)
    return _SPACES.sub(" ", "".join(kept)).strip()


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
