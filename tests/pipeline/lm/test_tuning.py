"""The LM-weight search of `pipeline/lm/tuning.py` on known WER surfaces, and the text normalisation of `lm_text.py`.

The search is checked against an exhaustive grid on surfaces with a known optimum: it must find it (or a setting
as good) in far fewer decodes, widen past 2.0 when the optimum lies beyond, keep the baseline when no LM setting
lowers WER, and take every trial from its cache on a rerun.
"""

from __future__ import annotations

import json

import pytest

from pipeline.decoding.plan import DecodingConfig
from pipeline.lm.text import TextNormaliser, check
from pipeline.lm.tuning import BONUSES, COARSE_WEIGHTS, WIDER_WEIGHTS, Score, TrialCache, sign_test_p, tune

GREEDY, CTC_BEAM = DecodingConfig(strategy="greedy"), DecodingConfig(strategy="ctc_beam")


def counting(surface):
    calls = []

    def evaluate(weight, bonus):
        calls.append((weight, bonus))
        return Score(surface(weight, bonus), surface(weight, bonus) / 2, ())

    return evaluate, calls


def bowl(best_weight, best_bonus=None, floor=0.05):
    def surface(weight, bonus):
        if weight == 0:
            return 0.30
        wer = floor + 0.04 * (weight - best_weight) ** 2
        return wer + (0.01 * (bonus - best_bonus) ** 2 if best_bonus is not None else 0.0)
    return surface


@pytest.mark.parametrize("best_weight", [0.5, 1.0, 1.5, 1.75])
def test_the_weight_search_finds_the_bowls_bottom_in_few_decodes(best_weight):
    evaluate, calls = counting(bowl(best_weight))
    result = tune(GREEDY, evaluate, TrialCache({}))
    exhaustive = min((w / 4 for w in range(1, 9)), key=lambda w: bowl(best_weight)(w, None))
    assert result.lm_helps and result.best.lm_weight == pytest.approx(exhaustive)
    assert result.decodes == len(calls) <= len(COARSE_WEIGHTS) + 3
    assert result.baseline.lm_weight == 0 and result.baseline.wer == pytest.approx(0.30)


def test_an_optimum_past_the_grid_is_followed_upwards():
    evaluate, calls = counting(bowl(3.0))
    result = tune(GREEDY, evaluate, TrialCache({}))
    assert result.best.lm_weight == 3.0
    assert {w for w, _ in calls} >= set(WIDER_WEIGHTS[:1])


def test_ctc_beam_searches_the_insertion_bonus_too():
    evaluate, calls = counting(bowl(1.0, best_bonus=4.0))
    result = tune(CTC_BEAM, evaluate, TrialCache({}))
    assert (result.best.lm_weight, result.best.bonus) == (1.0, 4.0)
    assert {b for w, b in calls if w} >= set(BONUSES)
    assert result.decodes < len(COARSE_WEIGHTS) * len(BONUSES)  # fewer than the grid
    assert result.chosen(CTC_BEAM, "lm.bin").ctc_insertion_bonus == 4.0


def test_no_lm_unless_it_lowers_dev_wer():
    evaluate, _ = counting(lambda weight, bonus: 0.20 if weight == 0 else 0.20 + 0.01 * weight)
    result = tune(GREEDY, evaluate, TrialCache({}))
    assert not result.lm_helps and result.best is result.baseline
    chosen = result.chosen(GREEDY, "lm.bin")
    assert chosen.lm_uri is None and chosen.lm_weight == 0
    equal, _ = counting(lambda weight, bonus: 0.20)  # as good is not better
    assert not tune(GREEDY, equal, TrialCache({})).lm_helps


def test_an_lm_a_word_better_on_a_small_dev_set_is_not_better_beyond_chance():
    baseline_errors = (2, 1, 0, 3, 1, 0, 2, 1, 0, 1, 2, 1)

    def one_better(weight, bonus):  # an LM of unrelated text, at a small weight: one word fixed by luck
        errors = baseline_errors if weight == 0 or weight > 0.6 else (1,) + baseline_errors[1:]
        return Score(sum(errors) / 100, 0.1, errors)

    assert not tune(GREEDY, one_better, TrialCache({})).lm_helps

    def most_better(weight, bonus):  # a domain LM: most utterances gain
        errors = baseline_errors if weight == 0 else tuple(max(e - 1, 0) for e in baseline_errors)
        return Score(sum(errors) / 100, 0.1, errors)

    assert tune(GREEDY, most_better, TrialCache({})).lm_helps
    assert sign_test_p(1, 0) == 0.5 and sign_test_p(9, 0) == pytest.approx(1 / 512) and sign_test_p(0, 0) == 1.0


def test_a_rerun_takes_every_trial_from_the_cache_and_another_identity_none():
    stored = {}
    evaluate, calls = counting(bowl(1.0))
    first = tune(GREEDY, evaluate, TrialCache({"lm": "a"}, None, lambda text: stored.update(text=text)))
    again_evaluate, again_calls = counting(bowl(1.0))
    again = tune(GREEDY, again_evaluate, TrialCache({"lm": "a"}, stored["text"]))
    assert again_calls == [] and again.decodes == 0 and again.reused == first.decodes == len(calls)
    assert again.best == first.best
    other, other_calls = counting(bowl(1.0))
    tune(GREEDY, other, TrialCache({"lm": "b"}, stored["text"]))  # another LM: nothing reused
    assert len(other_calls) == len(calls)
    assert json.loads(stored["text"])["identity"] == {"lm": "a"}


LOWERCASE_PIECES = ["<unk>", "\u2581", "\u2581the", "s", "'", *"abcdefghijklmnopqrstuvwxyz"]


@pytest.mark.parametrize(("line", "normalised"), [
    ("Send $1,250 to Bob's account!", "send one thousand two hundred fifty to bob's account"),
    ("Meet me on the 3rd at 4:30 PM.", "meet me on the third at four thirty pm"),
    ("Pay 3.5 dollars", "pay three point five dollars"),
    ("don\u2019t   STOP", "don't stop"),
])
def test_text_is_normalised_as_a_lowercase_tokenizer_without_digits_was_trained(line, normalised):
    assert TextNormaliser(LOWERCASE_PIECES)(line) == normalised


def test_digits_and_case_are_kept_where_the_tokenizer_has_them():
    normaliser = TextNormaliser(["\u2581A", "b", "7", "x"])
    assert (normaliser.lowercase, normaliser.spell_numbers) == (False, False)
    assert normaliser("Ab 77x") == "Ab 77x"


def test_text_the_tokenizer_cannot_encode_is_dropped_and_mostly_such_text_refused():
    normaliser = TextNormaliser(LOWERCASE_PIECES)
    text = normaliser.normalise([("a.txt", ["hello there", "\u4f60\u597d", "", "good day"])])
    assert text.lines == ["hello there", "good day"] and (text.read, text.unencodable) == (3, 1)
    check(text, ["a.txt"])
    with pytest.raises(ValueError, match="cannot encode.*a.txt, line 1"):
        check(normaliser.normalise([("a.txt", ["\u4f60\u597d", "\u518d\u89c1", "ok"])]), ["a.txt"])
    with pytest.raises(ValueError, match="empty"):
        check(normaliser.normalise([("e.txt", ["", "  "])]), ["e.txt"])
