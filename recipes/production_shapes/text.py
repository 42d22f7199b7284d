"""Training text for the production shapes' tokenizers, made here: nothing downloads, the same seed gives the
same lines.

- `cased_english(lines, seed)`: cased and punctuated English, as parakeet-tdt-0.6b-v2's tokenizer saw it:
  sentence case, names and places capitalized ("Paris", "Anna's"), "I", contractions ("don't", "it's"),
  commas, periods, question and exclamation marks. Built from the repository's own sample transcripts
  (`samples/`, lower case) and templates with names and places.
- `lower_english(lines, seed)`: the same sentences lower-cased with the punctuation removed but apostrophes
  kept, as parakeet-rnnt/ctc-1.1b's tokenizer saw it.
- `multilingual(lines, seed)`: cased, punctuated English plus six made-up European languages (letters with
  accents, "¿", "¡", "l'", German nouns capitalized), each a lexicon of made-up words drawn by a Zipf law:
  enough distinct text for the 8,192 pieces of a parakeet-tdt-0.6b-v3-shaped tokenizer. Only the pieces'
  shapes matter to a model with random weights, not the words' meanings.
"""

from __future__ import annotations

import ast
import itertools
import json
import random
import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]

FIRST_NAMES = (
    "Anna Ben Carla David Elena Frank Grace Henry Irene Jack Karen Liam Maria Noah Olivia Peter Quinn Rachel Sam "
    "Tara Umar Vera Walter Xavier Yusuf Zoe Alice Bruno Chloe Daniel Emma Felix Hannah Isaac Julia Kevin Laura "
    "Marcus Nina Oscar Paula Robert Sofia Thomas Ursula Victor Wendy"
).split()
SURNAMES = (
    "Smith Johnson Brown Garcia Miller Davis Wilson Anderson Taylor Thomas Moore Martin Jackson Thompson White "
    "Harris Clark Lewis Robinson Walker Young Allen King Wright Scott Green Baker Adams Nelson Carter Mitchell "
    "Perez Roberts Turner Phillips Campbell Parker Evans Edwards Collins O'Brien O'Neil McDonald"
).split()
PLACES = (
    "Paris London Berlin Madrid Rome Lisbon Vienna Prague Warsaw Dublin Oslo Stockholm Helsinki Athens Boston "
    "Chicago Denver Seattle Toronto Montreal Sydney Melbourne Tokyo Cairo Lagos Nairobi Lima Santiago Mexico "
    "Texas California Scotland Ireland Canada Brazil India Japan Europe Africa Monday Tuesday Wednesday Thursday "
    "Friday Saturday Sunday January February March April May June July August September October November December"
).split()
_CAPITALIZED = {word.lower(): word for word in FIRST_NAMES + SURNAMES + PLACES if "'" not in word}
_QUESTION_STARTS = frozenset("what where when who why how which can could would will is are do does did should "
                             "may shall have has".split())
_OPENERS = ("Yes", "No", "Well", "Okay", "So", "Now", "Please", "Honestly", "Actually", "Right")
_CONTRACTIONS = (("do not", "don't"), ("does not", "doesn't"), ("did not", "didn't"), ("is not", "isn't"),
                 ("are not", "aren't"), ("can not", "can't"), ("cannot", "can't"), ("will not", "won't"),
                 ("i am", "I'm"), ("it is", "it's"), ("that is", "that's"), ("what is", "what's"),
                 ("let us", "let's"), ("i will", "I'll"), ("you are", "you're"), ("we are", "we're"),
                 ("they are", "they're"), ("i have", "I've"), ("there is", "there's"))
_TEMPLATES = (
    "Did {name} fly to {place} on {day}?",
    "{name}'s flight to {place} leaves at {hour} o'clock.",
    "Yes, I'll call {name} {surname} when I'm back in {place}.",
    "Please send the report to {name} {surname}, not to {name2}.",
    "Where's {name2}? She said she'd be in {place} by {day}.",
    "We met {name} and {name2} in {place}, and it rained all week.",
    "Is {name} {surname} still working in {place}, or did he move to {place2}?",
    "Tell {name} that the meeting in {place} is moved to {day}.",
    "It's {hour} o'clock in {place}, isn't it?",
    "{name} {surname} won't be at the office on {day}.",
    "Wow, {place} was beautiful in {month}!",
    "How long does the train from {place} to {place2} take?",
    "My sister's friend {name} lives near {place}.",
    "Don't forget {name}'s birthday, it's on the {ordinal} of {month}.",
    "Could you book a table for {count} in {place}, please?",
)
_HOURS = "one two three four five six seven eight nine ten eleven twelve".split()
_ORDINALS = "first second third fourth fifth tenth twelfth twentieth".split()


def _manifest_texts(path: Path) -> list[str]:
    return [str(json.loads(line)["text"]) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _domain_common_words(general: list[str]) -> frozenset[str]:
    """The words of the domain text that are not names: those of the domain recipe's templates and numbers
    (`recipes/demo_model/make_domain.py`, `numbers_en.py`) and of the general sample transcripts. The rest of
    the domain text's words are the names and places its templates were filled with."""
    words = {word for line in general for word in line.split()}
    for name in ("make_domain.py", "numbers_en.py"):
        source = REPOSITORY / "recipes" / "demo_model" / name
        if source.is_file():
            for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    words |= set(re.findall(r"[a-z']+", node.value))
    return frozenset(words)


def _sample_transcripts() -> list[str]:
    """English lines shipped with the repository, lower case but for names: the samples' transcripts and the
    domain LM text, whose names and places are capitalized here."""
    samples = REPOSITORY / "samples"
    general = _manifest_texts(samples / "manifest.json") if (samples / "manifest.json").is_file() else []
    lines = list(general)
    for manifest in sorted((samples / "domain").glob("*.json")):
        lines += _manifest_texts(manifest)
    domain = samples / "domain" / "lm_text.txt"
    if domain.is_file():
        lines += [line for line in domain.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise FileNotFoundError(f"no sample transcripts under {samples}: the text needs them")
    common = _domain_common_words(general)
    return [" ".join(w if w in common else w.capitalize() for w in line.split()) if line not in general else line
            for line in lines]


def _cased(sentence: str, rng: random.Random) -> str:
    """A lower-case sentence -> cased and punctuated: contractions, "I", names, a comma, an end mark."""
    text = f" {sentence.strip()} "
    for spelled, contracted in _CONTRACTIONS:
        if rng.random() < 0.6:
            text = text.replace(f" {spelled} ", f" {contracted} ")
    words = [_CAPITALIZED.get(w, "I" if w == "i" else w) for w in text.split()]
    if not words:
        return ""
    question = words[0].lower() in _QUESTION_STARTS
    for index in range(2, len(words)):
        if words[index] in ("and", "but", "so") and rng.random() < 0.35:
            words[index - 1] += ","
    if rng.random() < 0.15:
        words = [rng.choice(_OPENERS) + ",", *words]
    words[0] = words[0][:1].upper() + words[0][1:]
    end = "?" if question else ("!" if rng.random() < 0.08 else ".")
    return " ".join(words) + end


def _template(rng: random.Random) -> str:
    names = rng.sample(FIRST_NAMES, 2)
    places = rng.sample(PLACES[:40], 2)
    return rng.choice(_TEMPLATES).format(
        name=names[0], name2=names[1], surname=rng.choice(SURNAMES), place=places[0], place2=places[1],
        day=rng.choice(PLACES[40:47]), month=rng.choice(PLACES[47:]), hour=rng.choice(_HOURS),
        ordinal=rng.choice(_ORDINALS), count=rng.choice(_HOURS[1:6]))


def cased_english(lines: int, seed: int = 0) -> list[str]:
    """`lines` cased, punctuated English sentences: the sample transcripts cased, and filled templates."""
    rng = random.Random(seed)
    transcripts = _sample_transcripts()
    return [_template(rng) if rng.random() < 0.3 else _cased(rng.choice(transcripts), rng) for _ in range(lines)]


def lower_english(lines: int, seed: int = 0) -> list[str]:
    """The sentences of `cased_english`, lower case, with apostrophes but no other punctuation."""
    return [re.sub(r"[^a-z' ]+", "", line.lower()).strip() for line in cased_english(lines, seed)]


# made-up languages: onsets, vowels, codas and a few function words of their own
_LANGUAGES = {
    "de": ("b d f g h k l m n p r s t w z sch st br gr kr tr fr pf sp".split(),
           "a e i o u ä ö ü ei au ie eu".split(), ["", "", "n", "r", "s", "t", "ch", "ng", "ß", "l", "cht", "st"],
           "der die das und ist nicht mit auf für ein eine zu".split()),
    "fr": ("b c d f g j l m n p r s t v ch qu tr pr gr br".split(),
           "a e é è ê i o ou u ai eau oi â ô au".split(), ["", "", "s", "t", "r", "n", "x", "nt", "lle", "ç"],
           "le la les et est dans pour une des pas que".split()),
    "es": ("b c d f g j l ll m n ñ p r rr s t v ch br tr".split(),
           "a e i o u á é í ó ú ue ie".split(), ["", "", "", "n", "s", "r", "l", "d", "z"],
           "el la los las y es en por que una con".split()),
    "it": ("b c d f g l m n p r s t v z gl gn sc ch st tr".split(),
           "a e i o u à è ì ò ù io ia".split(), ["", "", "", "n", "l", "r", "s", "tt", "ll", "cc"],
           "il la di che e non per una sono con".split()),
    "pl": ("b c d g k l ł m n p r s t w z sz cz rz ż ś dz prz".split(),
           "a e i o u y ą ę ó ie".split(), ["", "", "k", "m", "n", "ć", "ń", "ś", "sz", "ł"],
           "i w na nie to jest się że z do".split()),
    "pt": ("b c d f g j l m n p r s t v ch lh nh br pr tr".split(),
           "a e i o u ã õ á é ê ó ô ão".split(), ["", "", "s", "r", "l", "m", "ç"],
           "o a os as e é de em para um uma não".split()),
}


def _lexicon(language: str, size: int, rng: random.Random) -> list[str]:
    onsets, vowels, codas, function_words = _LANGUAGES[language]
    words: dict[str, None] = dict.fromkeys(function_words)
    while len(words) < size:
        syllables = rng.choice((1, 2, 2, 3, 3, 4))
        words["".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(syllables))] = None
    return list(words)


def _made_up_sentence(language: str, lexicon: list[str], zipf: list[float], rng: random.Random) -> str:
    words = rng.choices(lexicon, cum_weights=zipf, k=rng.randint(4, 14))
    if language == "de":  # nouns capitalized
        words = [w.capitalize() if rng.random() < 0.3 and w not in _LANGUAGES["de"][3] else w for w in words]
    if language in ("fr", "it") and rng.random() < 0.4:
        position = rng.randrange(len(words))
        words[position] = rng.choice(("l'", "d'", "qu'") if language == "fr" else ("l'", "dell'", "un'")) + \
            words[position]
    if rng.random() < 0.2 and len(words) > 4:
        words[rng.randrange(1, len(words) - 2)] += ","
    if rng.random() < 0.15:
        words[rng.randrange(len(words))] = rng.choice(FIRST_NAMES + PLACES[:40])
    words[0] = words[0][:1].upper() + words[0][1:]
    text = " ".join(words)
    mark = rng.random()
    if mark < 0.2:
        return f"¿{text}?" if language == "es" else f"{text}?"
    if mark < 0.27:
        return f"¡{text}!" if language == "es" else f"{text}!"
    return f"{text}."


def multilingual(lines: int, seed: int = 0, lexicon_size: int = 6000) -> list[str]:
    """`lines` sentences: a seventh cased English (`cased_english`), the rest in six made-up languages."""
    rng = random.Random(seed)
    lexicons = {language: _lexicon(language, lexicon_size, rng) for language in _LANGUAGES}
    zipf = list(itertools.accumulate(1.0 / rank for rank in range(1, lexicon_size + 1)))
    english = iter(cased_english(lines // 7 + 1, seed))
    languages = [*_LANGUAGES, "en"]
    out = []
    for index in range(lines):
        language = languages[index % len(languages)]
        out.append(next(english) if language == "en" else _made_up_sentence(language, lexicons[language], zipf, rng))
    return out


TEXTS = {"cased": cased_english, "lower": lower_english, "multilingual": multilingual}
