"""`jobs/lm_bias.py --phrases`: the boost weight tuned on dev like the LM weight.

- The search (`pipeline/lm/tuning.py::tune` with `boost_weights`) on known WER surfaces: the boost grid is tried at the
  LM setting chosen without boosting, no boosting stays a candidate, and boosting is chosen only where it wins
  beyond chance; trials measured before boost weights were tuned are reused, boosted ones are told apart.
- A bad phrase list is refused before any cluster work, naming the file and line.
- End to end on the bundled model and the bundled domain set's dev utterances that address a contact, with the
  domain's contact book as the phrase list: a phrase list alone (boosting chosen, used for the corpus, a rerun
  redoes nothing), and a phrase list with the domain text's LM.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from pipeline import schema
from pipeline.decoding.plan import DecodingConfig
from pipeline.io import sink
from pipeline.lm.tuning import BOOST_WEIGHTS, RECHECK_LM_STEP, Score, TrialCache, setting_key, tune

REPOSITORY = Path(__file__).resolve().parents[2]
DOMAIN = REPOSITORY / "samples" / "domain"
GREEDY = DecodingConfig(strategy="greedy")
UTTERANCES = 100  # of the fake surfaces below


# --- the search, on known surfaces ----------------------------------------------------------------------------
def scored(wer: float) -> Score:
    """A score whose per-utterance errors make every lower WER an improvement of that many utterances, none worse:
    `wer` 0.30 is 30 utterances with one error each."""
    wrong = round(wer * UTTERANCES)
    return Score(wer, wer / 2, (1,) * wrong + (0,) * (UTTERANCES - wrong))


def surface(best_lm: float | None, best_boost: float, boost_gain: float):
    """WER 0.30 without anything; an LM bowl at `best_lm` (None: the LM never helps); boosting lowers WER by up to
    `boost_gain`, most at `best_boost`, and costs past it."""
    calls = []

    def evaluate(weight, bonus, boost=0.0):
        calls.append((weight, bonus, boost))
        wer = 0.30
        if weight and best_lm is not None:
            wer = 0.10 + 0.04 * (weight - best_lm) ** 2
        if boost:
            wer += -boost_gain + 0.08 * (boost - best_boost) ** 2
        return scored(wer)

    return evaluate, calls


def test_the_boost_weight_is_searched_at_the_lm_weight_chosen_then_the_lm_weight_again():
    evaluate, calls = surface(best_lm=1.0, best_boost=0.5, boost_gain=0.06)
    result = tune(GREEDY, evaluate, TrialCache({}), boost_weights=BOOST_WEIGHTS)
    assert result.lm_helps and result.boost_helps
    assert (result.unboosted.lm_weight, result.unboosted.boost_weight) == (1.0, 0.0)
    assert (result.best.lm_weight, result.best.boost_weight) == (1.0, 0.5)
    assert result.best.wer < result.unboosted.wer < result.baseline.wer
    lm_calls = [c for c in calls if c[2] == 0]
    boost_calls = [c for c in calls if c[2] > 0]
    assert calls[: len(lm_calls)] == lm_calls  # the LM weight first, without boosting
    assert boost_calls[: len(BOOST_WEIGHTS)] == [(1.0, None, b) for b in BOOST_WEIGHTS]
    assert boost_calls[len(BOOST_WEIGHTS):] == [(round(1.0 / RECHECK_LM_STEP, 4), None, 0.5),
                                                 (1.0 * RECHECK_LM_STEP, None, 0.5)]
    assert result.decodes == len(calls) == len({setting_key(*c) for c in calls})
    chosen = result.chosen(GREEDY, "lm.bin", "names.txt")
    assert (chosen.lm_weight, chosen.phrases_uri, chosen.boost_weight) == (1.0, "names.txt", 0.5)


def test_boosting_one_utterance_better_is_not_chosen():
    evaluate, _ = surface(best_lm=1.0, best_boost=0.5, boost_gain=0.01)
    result = tune(GREEDY, evaluate, TrialCache({}), boost_weights=BOOST_WEIGHTS)
    assert min(t.wer for t in result.trials if t.boost_weight) < result.unboosted.wer  # better, by one utterance
    assert not result.boost_helps and result.best is result.unboosted and result.lm_helps
    assert result.chosen(GREEDY, "lm.bin", "names.txt").phrases_uri is None


def test_a_phrase_list_alone_searches_the_boost_weight_only():
    evaluate, calls = surface(best_lm=None, best_boost=0.75, boost_gain=0.08)
    result = tune(GREEDY, evaluate, TrialCache({}), lm=False, boost_weights=BOOST_WEIGHTS)
    assert calls == [(0.0, None, 0.0)] + [(0.0, None, b) for b in BOOST_WEIGHTS]
    assert result.boost_helps and not result.lm_helps and result.best.boost_weight == 0.75
    assert result.unboosted is result.baseline
    chosen = result.chosen(GREEDY, None, "names.txt")
    assert (chosen.lm_uri, chosen.phrases_uri, chosen.boost_weight) == (None, "names.txt", 0.75)


def test_where_the_lm_loses_boosting_is_searched_without_it():
    evaluate, calls = surface(best_lm=None, best_boost=0.5, boost_gain=0.06)
    result = tune(GREEDY, evaluate, TrialCache({}), boost_weights=BOOST_WEIGHTS)
    assert not result.lm_helps and result.boost_helps
    assert [c for c in calls if c[2] > 0] == [(0.0, None, b) for b in BOOST_WEIGHTS]  # no LM re-check without an LM


def test_lm_trials_stored_before_boosting_are_reused_and_boosted_ones_told_apart():
    lm_only, _ = surface(best_lm=1.0, best_boost=0.5, boost_gain=0.06)
    stored = {}
    first = tune(GREEDY, lambda w, b: lm_only(w, b), TrialCache({"lm": "a"}, None, lambda t: stored.update(text=t)))
    old_format = json.loads(stored["text"])
    for trial in old_format["trials"]:
        del trial["boost_weight"]  # as a tuning file written before boost weights were tuned
    evaluate, calls = surface(best_lm=1.0, best_boost=0.5, boost_gain=0.06)
    again = tune(GREEDY, evaluate, TrialCache({"lm": "a"}, json.dumps(old_format)), boost_weights=BOOST_WEIGHTS)
    assert again.reused == first.decodes and all(boost > 0 for _, _, boost in calls)
    assert again.unboosted == first.best and again.best.boost_weight == 0.5
    assert setting_key(1.0, None, 0.5) != setting_key(1.0, None) == "1"


# --- the job --------------------------------------------------------------------------------------------------
def contact_book(folder: Path) -> Path:
    """The domain's contact names, one a line, as `benchmarks/boosting.py` reads them (236 names)."""
    sys.path.insert(0, str(REPOSITORY))
    from benchmarks.boosting import contact_names

    texts = (DOMAIN / "lm_text.txt").read_text().splitlines() + [
        json.loads(line)["text"] for name in ("dev.json", "test.json")
        for line in (DOMAIN / name).read_text().splitlines() if line.strip()]
    names = contact_names(texts)
    assert len(names) == 236
    path = folder / "contacts.txt"
    path.write_text("\n".join(names) + "\n")
    return path


def addressed(path: Path, names: list[str], count: int, folder: Path, file_name: str) -> Path:
    """The first `count` rows of a bundled manifest whose reference holds a contact name, audio paths absolute."""
    patterns = [re.compile(rf"(?<![\w']){re.escape(n)}(?![\w'])") for n in names]
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [row for row in rows if any(p.search(row["text"]) for p in patterns)][:count]
    out = folder / file_name
    out.write_text("".join(json.dumps({**row, "audio_filepath": str(path.parent / row["audio_filepath"])}) + "\n"
                           for row in rows))
    return out


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("phrase-sets")
    contacts = contact_book(folder)
    names = contacts.read_text().splitlines()
    return {"contacts": contacts, "dev": addressed(DOMAIN / "dev.json", names, 20, folder, "dev.json"),
            "corpus": addressed(DOMAIN / "test.json", names, 3, folder, "corpus.json")}


def test_a_bad_phrase_list_is_refused_before_any_cluster_work(sets, tmp_path, monkeypatch):
    from jobs.lm_bias import main

    joined = []  # the clusters the job joins: none (the session's Ray may be up already, tests/conftest.py)
    monkeypatch.setattr("pipeline.graph.connect_ray", joined.append)

    blank = tmp_path / "blank.txt"
    blank.write_text("rachel perkins\n\nkatherine robinson\n")
    weight = tmp_path / "weight.txt"
    weight.write_text("rachel perkins\tlots\n")
    chinese = tmp_path / "zh.txt"
    chinese.write_text("rachel perkins\nkatherine robinson\n\u4f60\u597d\n")
    cases = [
        ([], "pass --text .* or --phrases"),
        (["--phrases", str(blank)], re.escape(f"--phrases {blank}, line 2: empty phrase")),
        (["--phrases", str(weight)], re.escape(f"--phrases {weight}, line 1: the weight after the tab")),
        (["--phrases", str(chinese)], re.escape(f"--phrases {chinese}, line 3: ") + ".*cannot encode"),
        (["--phrases", str(tmp_path / "missing.txt")], "missing.txt: no such file"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit, match=message):
            main([*argv, "--dev", str(sets["dev"]), "--strategies", "greedy", "--output", str(tmp_path / "out")])
        assert not (tmp_path / "out").exists()  # refused before anything was built, tuned or written
    assert joined == []


def run_job(sets, output, *extra):
    from jobs.lm_bias import main

    assert main(["--phrases", str(sets["contacts"]), "--dev", str(sets["dev"]), "--strategies", "greedy",
                 "--manifest", str(sets["corpus"]), "--output", str(output), *extra]) == 0
    return json.loads((output / "report.json").read_text())


@pytest.mark.ray
@pytest.mark.nemo
@pytest.mark.slow
def test_a_phrase_list_alone_is_tuned_chosen_and_used_and_a_rerun_redoes_nothing(ray_cluster, sets, tmp_path):
    output = tmp_path / "bias"
    report = run_job(sets, output)
    (greedy,) = report["strategies"]
    assert report["lm"] is None and not (output / "lm").exists() and not (output / "dev_wer.png").exists()
    assert [(t["lm_weight"], t["boost_weight"]) for t in greedy["trials"]] == [(0, 0)] + [(0, b) for b in BOOST_WEIGHTS]
    # on these 20 dev utterances boosting the names at 0.5 improves 6 and worsens none (docs/lm_bias.md)
    assert greedy["boost_helps"] and not greedy["lm_helps"]
    assert greedy["best"]["boost_weight"] > 0 and greedy["best"]["wer"] < greedy["baseline"]["wer"]
    assert greedy["best"]["wer"] == min(t["wer"] for t in greedy["trials"])
    decoding = yaml.safe_load((output / "decoding.yaml").read_text())["decoding"]
    assert decoding["phrases_uri"] == str(sets["contacts"]) and decoding["lm_uri"] is None
    assert decoding["boost_weight"] == greedy["best"]["boost_weight"]
    markdown = (output / "report.md").read_text()
    assert "| boost weight chosen on dev |" in markdown and "dev_wer_boost.png" in markdown
    assert (output / "dev_wer_boost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    transcripts = sink.read_output(str(output / "transcripts"))
    assert transcripts.num_rows == 3 and set(transcripts.column(schema.STATUS).to_pylist()) == {"ok"}
    assert f"boost_weight={decoding['boost_weight']:g}" in transcripts.column(schema.DECODING)[0].as_py()

    again = run_job(sets, output)
    assert again["strategies"][0]["decodes"] == 0 and again["strategies"][0]["reused"] == len(greedy["trials"])
    assert again["chosen"]["best"] == report["chosen"]["best"]
    assert again["transcripts"]["this_run_rows"] == 0


@pytest.mark.ray
@pytest.mark.nemo
@pytest.mark.slow
def test_with_an_lm_the_boost_weight_is_tuned_at_the_lm_weight_chosen(ray_cluster, sets, tmp_path):
    output = tmp_path / "bias"
    report = run_job(sets, output, "--text", str(DOMAIN / "lm_text.txt"), "--orders", "4")
    (greedy,) = report["strategies"]
    unboosted, best = greedy["unboosted"], greedy["best"]
    assert greedy["lm_helps"] and unboosted["lm_weight"] > 0 and unboosted["boost_weight"] == 0
    lm_trials = [t for t in greedy["trials"] if not t["boost_weight"]]
    boosted = [t for t in greedy["trials"] if t["boost_weight"]]
    assert greedy["trials"][: len(lm_trials)] == lm_trials  # the LM weight first
    assert [(t["lm_weight"], t["boost_weight"]) for t in boosted[: len(BOOST_WEIGHTS)]] == [
        (unboosted["lm_weight"], b) for b in BOOST_WEIGHTS]
    assert best["wer"] <= unboosted["wer"] < greedy["baseline"]["wer"]
    assert best == unboosted or (greedy["boost_helps"] and best["wer"] < unboosted["wer"])
    decoding = yaml.safe_load((output / "decoding.yaml").read_text())["decoding"]
    assert decoding["lm_weight"] == best["lm_weight"]
    assert (decoding["phrases_uri"] is not None) == greedy["boost_helps"]
    markdown = (output / "report.md").read_text()
    assert "| dev WER no boost |" in markdown and "| boost weight chosen on dev |" in markdown
    for name in ("dev_wer.png", "dev_wer_boost.png"):
        assert (output / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
