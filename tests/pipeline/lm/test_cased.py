"""Text, phrases, word LMs, filters and scores for a cased, punctuated tokenizer (parakeet's kind), against a small
one trained here (`tests/support/cased_tokenizer.py`).

- The LM text keeps case and punctuation where the tokenizer writes them, punctuation written as the model writes
  it ("Paris, France.", not "Paris , France ."), and a file written in one case recased; the rules are stated.
- WER and CER come normalised and as written (jiwer on the raw strings is the peer of the written figures).
- A phrase written in lower case boosts the model's "Paris"; one written with capitals only itself.
- A word-level ARPA converted for the tokenizer: a lower-case LM's sentences start with a capital, a punctuated LM's
  punctuation is attached to its word.
- The pseudo-labelling filters count letters, not punctuation; a run that keeps nothing is a report saying so.
"""

from __future__ import annotations

import pytest
import torch

from decoders.boosting import PhraseBoosting, phrase_casings
from pipeline.decoding.fusion import PhraseTokenizer
from pipeline.labels.filters import LabelFilters, judge, spoken_letters
from pipeline.lm.text import TextNormaliser, plain_text
from pipeline.reports.scoring import error_rates
from tests.support.cased_tokenizer import cased_processor

LOWERCASE_PIECES = ["<unk>", "\u2581", "\u2581the", "s", "'", *"abcdefghijklmnopqrstuvwxyz"]


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    pytest.importorskip("sentencepiece")
    return cased_processor(tmp_path_factory.mktemp("cased"))


@pytest.fixture(scope="module")
def normaliser(processor):
    return TextNormaliser(processor.id_to_piece(i) for i in range(processor.get_piece_size()))


def test_case_and_punctuation_are_kept_and_written_as_the_model_writes_them(processor, normaliser):
    assert (normaliser.cased, normaliser.spell_numbers, normaliser.punctuation) == (True, False, "!,.?")
    assert normaliser("Call Rachel at 5, please!") == "Call Rachel at 5, please!"
    # a tokenized text (or a word LM's words): the model writes no space before punctuation, and the tokenizer
    # spells the two differently
    assert normaliser("Paris , France .") == "Paris, France."
    assert processor.encode("Paris , France .") != processor.encode("Paris, France.")
    assert normaliser("Where is Wendy ? Dinner is at 7 !") == "Where is Wendy? Dinner is at 7!"
    # marks the tokenizer lacks become spaces; curly apostrophes are the tokenizer's
    assert normaliser("Jane \u2014 don\u2019t (ever) #win") == "Jane don't ever win"


def test_text_written_in_one_case_is_recased_for_a_cased_tokenizer_and_only_for_one(normaliser):
    text = normaliser.normalise([("lower.txt", ["call rachel at five.", "", "turn on the lights"]),
                                 ("upper.txt", ["CALL RACHEL PERKINS"]), ("cased.txt", ["call Rachel, please"])])
    assert text.lines == ["Call rachel at five.", "Turn on the lights", "Call rachel perkins", "call Rachel, please"]
    assert text.recased == ["lower.txt", "upper.txt"] and text.punctuated
    # a capital the tokenizer lacks ("Q"): the line stays lower case rather than unencodable
    assert normaliser("quick fox", recase=True) == "quick fox"
    assert normaliser("5 dogs barked", recase=True) == "5 dogs barked"  # a number starts it: no capital
    lowercase = TextNormaliser(LOWERCASE_PIECES)
    assert lowercase.normalise([("a.txt", ["Call Rachel"])]).lines == ["call rachel"]
    assert lowercase.normalise([("a.txt", ["call rachel"])]).recased == []
    assert not normaliser.normalise([("a.txt", ["call rachel"])]).punctuated


def test_the_normalisers_rules_are_stated(normaliser):
    rules = normaliser.rules()
    assert rules[0].startswith("case kept") and "one case" in rules[0]
    assert rules[1].startswith("digits kept")
    assert "(! , . ?)" in rules[2] and "no space before , . ! ?" in rules[2]
    assert normaliser.describe() == "case kept, digits kept, punctuation ! , . ? kept, other removed"
    lower = TextNormaliser(LOWERCASE_PIECES).rules()
    assert lower[0].startswith("lowercased") and lower[1].startswith("numbers spelled out")
    assert lower[2].startswith("punctuation and symbols become spaces")


@pytest.mark.parametrize(("text", "plain"), [
    ("Call Rachel at 5, please!", "call rachel at five please"),
    ("Pay $1,250 on the 3rd.", "pay one thousand two hundred fifty on the third"),
    ("Don\u2019t   stop - it's well-known.", "dont stop its well known"),
    ("\u00c9COLE, caf\u00e9?", "\u00e9cole caf\u00e9"),
    ("...", ""),
])
def test_plain_text_is_the_words_alone(text, plain):
    assert plain_text(text) == plain


def test_wer_and_cer_come_normalised_and_as_written():
    import jiwer

    references = ["call rachel at five please", "is it raining in london today"]
    hypotheses = ["Call Rachel at 5, please!", "Is it raining in Londen today?"]
    rates = error_rates(references, hypotheses)
    assert rates.wer == pytest.approx(1 / 11) and rates.errors == (0, 1)
    assert rates.written_wer == pytest.approx(jiwer.wer(references, hypotheses)) == pytest.approx(7 / 11)
    assert rates.written_cer == pytest.approx(jiwer.cer(references, hypotheses))
    assert rates.written_cer > rates.cer > 0
    # written as the model writes: the written WER counts the case and punctuation errors the normalised one ignores
    same = error_rates(["Call Rachel, please!"], ["call Rachel please"])
    assert (same.wer, same.written_wer) == (0.0, pytest.approx(3 / 3))


def test_the_tuning_score_decides_on_the_normalised_wer():
    from pipeline.lm.tuning import TrialCache, score

    measured = score(["call rachel at five please"], ["Call Rachel at 5, please!"])
    assert (measured.wer, measured.errors) == (0.0, (0,)) and measured.written_wer == pytest.approx(0.8)
    # trials stored before both were scored hold the written WER as `wer`: not reused
    stored = '{"identity": {}, "trials": [{"key": "0", "lm_weight": 0.0, "bonus": null, "wer": 0.8, "cer": 0.2, ' \
             '"decode_s": 1.0, "errors": [4], "boost_weight": 0.0}]}'
    assert TrialCache({}, stored).trials == {}


def test_phrase_casings():
    assert phrase_casings("paris") == ["paris", "Paris"]
    assert phrase_casings("bank of america") == ["bank of america", "Bank of america", "Bank of America"]
    assert phrase_casings("the beatles") == ["the beatles", "The beatles", "The Beatles"]
    for written in ("NASA", "iPhone", "Paris", "McDonald's", "42"):
        assert phrase_casings(written) == [written]


def test_a_phrase_written_in_lower_case_boosts_what_a_cased_model_writes(processor):
    tokenize = PhraseTokenizer(processor)
    vocab_size = processor.get_piece_size()

    def reward(phrase: str, text: str) -> float:
        tree = PhraseBoosting.from_token_sequences(tokenize(phrase), vocab_size)
        return tree.score_sequence(processor.encode(text))

    assert reward("paris", "Paris") > 0 and reward("paris", "paris") > 0
    assert reward("bank of america", "Bank of America") > 0
    assert reward("bank of america", "Bank Of America") == 0  # not a casing a cased model writes
    assert reward("Paris", "paris") == 0 and reward("NASA", "Nasa") == 0  # capitals: as written only
    assert reward("quick fox", "quick fox") > 0  # "Quick": a capital the tokenizer lacks, that casing left out
    assert tokenize("quick fox") == tokenize.spell("quick fox")


def test_the_pseudo_labelling_filters_count_letters_not_punctuation():
    assert spoken_letters("Yes. No! 42, please?") == len("yesnofortytwoplease")
    filters = LabelFilters(min_confidence=0.0, min_chars_per_s=2.0, max_chars_per_s=8.0)
    row = {"status": "ok", "error": "", "audio_duration": 2.0, "duration": 2.0, "confidence": 0.9}
    # 13 letters in 2 s: kept, though 24 characters without spaces would be 12/s
    assert judge({**row, "text": "Well... yes!!! Okay?!?!"}, filters) is None
    assert "characters/s" in judge({**row, "text": "Well yes okay sure fine great"}, filters)
    # "7" is said "seven": 5 letters in 2 s, not one character
    assert judge({**row, "text": "7."}, filters) is None
    assert judge({**row, "text": "Go, go, go, go, go."}, LabelFilters(min_confidence=0.0)).startswith(
        "repetition: 'go' 5 times")


def test_a_run_that_keeps_nothing_is_a_report_saying_so():
    from pipeline.decoding import DecodingConfig
    from pipeline.reports.pseudo_label import build_report, curve, report_markdown

    filters = LabelFilters(min_confidence=0.99)
    rows = [{"status": "ok", "error": "", "text": text, "reference_text": reference, "audio_duration": 2.0,
             "duration": 2.0, "confidence": 0.5}
            for text, reference in [("Call Rachel at 5, please!", "call rachel at five please"),
                                    ("Is it raining in London?", "is it raining in london")]]
    rejected = [(row, judge(row, filters)) for row in rows]
    report = build_report("model.nemo", DecodingConfig(), filters, rows, [], rejected, {"confidence": 2},
                          curve(rows, filters), "out/run", {"this_run": {"rows": 2}})
    assert report["wer_kept"] is None and report["scores"]["kept"] is None
    assert report["scores"]["all"]["wer"] == 0.0 and report["scores"]["all"]["written_wer"] == pytest.approx(6 / 10)
    markdown = report_markdown(report)
    assert "**No utterance was kept**" in markdown
    assert "| all | 2 | 0.0% (60.0%) |" in markdown and "| kept | 0 | - | - |" in markdown
    assert "normalised" in markdown and "as written" in markdown
    nothing = build_report("model.nemo", DecodingConfig(), filters, [], [], [], {}, curve([], filters), "out/run",
                           {"this_run": {"rows": 0}})
    assert "Nothing new to label" in report_markdown(nothing)


@pytest.fixture(scope="module")
def word_arpas(tmp_path_factory):
    """Two word trigram LMs (varikn): one of lower-case text without punctuation, one of cased text whose
    punctuation is tokenized into words of its own."""
    pytest.importorskip("varikn")
    from pipeline.lm.build import train_varikn

    folder = tmp_path_factory.mktemp("word_arpas")
    names = ["rachel", "victor", "wendy", "gary", "irene"]
    places = ["paris", "london", "oslo", "hamburg"]
    lower = [f"call {name} in {place}" for name in names for place in places]
    lower += [f"is it raining in {place} today" for place in places] * 3
    cased = [f"{name.title()} , call {place.title()} , please ." for name in names for place in places]
    cased += [f"Is it raining in {place.title()} ?" for place in places] * 3
    arpas = {}
    for name, lines in (("lower", lower), ("cased", cased)):
        text = folder / f"{name}.txt"
        text.write_text("\n".join(lines * 5) + "\n", encoding="utf-8")
        arpas[name] = folder / f"{name}.arpa"
        train_varikn(text, arpas[name], 3, folder, scale=0.001)
    return arpas


def test_a_word_lm_converted_for_a_cased_tokenizer(processor, word_arpas, tmp_path):
    from decoders.ngram import NgramLm
    from pipeline.lm.word_arpa import convert_word_arpa, model_speller

    speller, vocab_size = model_speller(processor), processor.get_piece_size()

    def scores(lm: NgramLm, *texts: str) -> list[float]:
        encoded = [processor.encode(text) for text in texts]
        tokens = torch.zeros(len(encoded), max(map(len, encoded)), dtype=torch.long)
        for row, ids in enumerate(encoded):
            tokens[row, :len(ids)] = torch.tensor(ids)
        return lm.score_sequences(tokens, torch.tensor([len(ids) for ids in encoded])).tolist()

    report = convert_word_arpa(word_arpas["lower"], speller, vocab_size, tmp_path / "lower.lm", sentences=3000,
                               work_dir=tmp_path)
    assert report["recased"] and not report["punctuated"]
    capitalised, lower = scores(NgramLm.load(tmp_path / "lower.lm"), "Call wendy in oslo", "call wendy in oslo")
    assert capitalised > lower + 1.0  # the model starts a sentence with a capital: so do the drawn sentences

    report = convert_word_arpa(word_arpas["cased"], speller, vocab_size, tmp_path / "cased.lm", sentences=3000,
                               work_dir=tmp_path)
    assert not report["recased"] and report["punctuated"]
    attached, spaced = scores(NgramLm.load(tmp_path / "cased.lm"), "Wendy, call Oslo, please.",
                              "Wendy , call Oslo , please .")
    assert attached > spaced + 1.0  # punctuation written as the model writes it
