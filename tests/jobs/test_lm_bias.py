"""`jobs/lm_bias.py` end to end on the bundled model and a slice of the bundled domain set, on an in-process Ray.

- Domain text: the LM is built, tuned, chosen, and the corpus transcribed with it.
- Unrelated text (letter salad): no LM setting beats decoding without it on dev, so the job chooses no LM.
- A rerun into the same output reuses the LM and every tuning trial, and transcribes nothing twice.
- Bad input is refused before any cluster work.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from pipeline import schema
from pipeline.io import sink

REPOSITORY = Path(__file__).resolve().parents[2]
DOMAIN = REPOSITORY / "samples" / "domain"


def subset(path: Path, count: int, folder: Path, name: str) -> Path:
    """The first `count` lines of a bundled manifest, with absolute audio paths."""
    lines = [json.loads(line) for line in path.read_text().splitlines()[:count]]
    out = folder / name
    out.write_text("".join(json.dumps({**row, "audio_filepath": str(path.parent / row["audio_filepath"])}) + "\n"
                           for row in lines))
    return out


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bias-sets")
    return {"dev": subset(DOMAIN / "dev.json", 12, folder, "dev.json"),
            "test": subset(DOMAIN / "test.json", 6, folder, "test.json"),
            "corpus": subset(DOMAIN / "test.json", 3, folder, "corpus.json")}


def run_job(sets, text, output, *extra):
    from jobs.lm_bias import main

    assert main(["--text", str(text), "--dev", str(sets["dev"]), "--strategies", "greedy", "--orders", "4",
                 "--manifest", str(sets["corpus"]), "--output", str(output), *extra]) == 0
    return json.loads((output / "report.json").read_text())


def test_bad_input_is_refused_before_any_cluster_work(sets, tmp_path, monkeypatch):
    from jobs.lm_bias import main

    joined = []  # the clusters the job joins: none (the session's Ray may be up already, tests/conftest.py)
    monkeypatch.setattr("pipeline.graph.connect_ray", joined.append)

    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    chinese = tmp_path / "zh.txt"
    chinese.write_text("\u4f60\u597d\u4e16\u754c\n\u518d\u89c1\n")
    no_text = tmp_path / "dev_no_text.json"
    no_text.write_text(json.dumps({"audio_filepath": str(DOMAIN / "audio" / "dev100.flac"), "duration": 1.0}) + "\n")
    missing_audio = tmp_path / "dev_missing_audio.json"
    missing_audio.write_text(json.dumps({"audio_filepath": "nowhere.flac", "duration": 1.0, "text": "hi"}) + "\n")
    cases = [
        (["--text", str(empty), "--dev", str(sets["dev"])], "the files are empty"),
        (["--text", str(chinese), "--dev", str(sets["dev"])], "cannot encode"),
        (["--text", str(tmp_path / "missing.txt"), "--dev", str(sets["dev"])], "no such file"),
        (["--text", str(DOMAIN / "lm_text.txt"), "--dev", str(no_text)], "line 1: no reference `text`"),
        (["--text", str(DOMAIN / "lm_text.txt"), "--dev", str(sets["dev"]), "--strategies", "wind_beam_x"],
         "unknown 'wind_beam_x'"),
        (["--text", str(DOMAIN / "lm_text.txt"), "--dev", str(missing_audio)], "line 1: no audio file"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit, match=message):
            main([*argv, "--output", str(tmp_path / "out")])
        assert not (tmp_path / "out").exists()  # refused before anything was built or written
    assert joined == []


@pytest.mark.ray
@pytest.mark.nemo
@pytest.mark.slow
def test_a_domain_lm_is_tuned_chosen_and_used_and_a_rerun_redoes_nothing(ray_cluster, sets, tmp_path):
    output = tmp_path / "bias"
    report = run_job(sets, DOMAIN / "lm_text.txt", output, "--test", str(sets["test"]))
    (greedy,) = report["strategies"]
    assert report["chosen"]["lm_helps"] and greedy["best"]["wer"] < greedy["baseline"]["wer"]
    assert greedy["decodes"] >= 6 and greedy["reused"] == 0 and "test_best" in greedy
    decoding = yaml.safe_load((output / "decoding.yaml").read_text())["decoding"]
    assert decoding["lm_weight"] == greedy["best"]["lm_weight"] > 0
    assert decoding["lm_uri"] == str(output / "lm" / "domain.lm")
    for name in ("report.md", "dev_wer.png", "lm/domain.lm", "lm/lm.json", "tuning/greedy.json"):
        assert (output / name).stat().st_size > 0, name
    assert (output / "dev_wer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    transcripts = sink.read_output(str(output / "transcripts"))
    assert transcripts.num_rows == 3 and set(transcripts.column(schema.STATUS).to_pylist()) == {"ok"}
    assert f"lm_weight={decoding['lm_weight']:g}" in transcripts.column(schema.DECODING)[0].as_py()

    again = run_job(sets, DOMAIN / "lm_text.txt", output, "--test", str(sets["test"]))
    assert again["lm"]["reused"] and again["strategies"][0]["decodes"] == 0
    assert again["strategies"][0]["reused"] == greedy["decodes"]
    assert again["chosen"]["best"] == report["chosen"]["best"]
    assert again["transcripts"]["this_run_rows"] == 0 and sink.read_output(str(output / "transcripts")).num_rows == 3


@pytest.mark.ray
@pytest.mark.nemo
@pytest.mark.slow
def test_an_lm_of_unrelated_text_is_not_used(ray_cluster, sets, tmp_path):
    rng = random.Random(7)
    salad = tmp_path / "salad.txt"
    salad.write_text("\n".join(" ".join("".join(rng.choice("qxzjvkwy") for _ in range(rng.randint(2, 7)))
                                         for _ in range(rng.randint(3, 9))) for _ in range(400)) + "\n")
    report = run_job(sets, salad, tmp_path / "bias")
    assert not report["chosen"]["lm_helps"]
    assert report["chosen"]["best"] == report["chosen"]["baseline"]  # a word better by luck is not enough
    decoding = yaml.safe_load((tmp_path / "bias" / "decoding.yaml").read_text())["decoding"]
    assert decoding["lm_uri"] is None and decoding["lm_weight"] == 0
    assert "without the LM on dev beyond chance" in (tmp_path / "bias" / "report.md").read_text()
    assert "lm=" not in sink.read_output(str(tmp_path / "bias" / "transcripts")).column(schema.DECODING)[0].as_py()
