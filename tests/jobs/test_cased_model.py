"""`jobs/lm_bias.py` and `jobs/pseudo_label.py` on a cased, punctuated model, on an in-process Ray.

A small random hybrid TDT+CTC model with a cased, punctuated SentencePiece tokenizer (NeMo's `create_spt_model`,
`do_lower_case=False`; `tests/support/cased_tokenizer.py`), its emission rate calibrated (`random_nemo`), and a dev
set whose references are lower case without punctuation, as many users' are (the issue's run scored them against
the model's cased, punctuated output with no normalisation). NeMo's own greedy `transcribe()` of the same files is
the peer: each job's WER and CER, normalised and as written, are those of NeMo's texts against the references.

- lm_bias: the LM text keeps the model's case and punctuation, the report states the normaliser's rules and gives
  WER and CER normalised and as written; a phrase list written in lower case is accepted for the cased tokenizer.
- pseudo_label: a run whose filters keep nothing is a report saying so (it was a traceback), with its WERs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.lm.text import plain_text
from pipeline.reports.scoring import error_rates
from tests.support.cased_tokenizer import CASED_SENTENCES

pytestmark = [pytest.mark.ray, pytest.mark.nemo]

SPOKEN = CASED_SENTENCES[:6]


@pytest.fixture(scope="module")
def cased_model(tmp_path_factory):
    """The cased model (.nemo), the dev manifest (lower-case references), and NeMo's greedy texts of its files."""
    pytest.importorskip("nemo.collections.asr")
    import soundfile

    from tests.support import random_nemo
    from tests.support.cased_tokenizer import train_cased_tokenizer
    from tests.support.nemo_peer import nemo_transcribe

    root = tmp_path_factory.mktemp("cased_model")
    tokenizer_dir = train_cased_tokenizer(root / "tokenizer", vocab_size=128, nemo=True)
    files = random_nemo.synthesize(root / "audio", SPOKEN)
    model = random_nemo.build_random_model("tdt_ctc", tokenizer_dir)
    random_nemo.calibrate_emission(model, [soundfile.read(path, dtype="float32")[0] for path in files[:4]])
    checkpoint = root / "cased.nemo"
    model.save_to(str(checkpoint))
    references = [plain_text(sentence) for sentence in SPOKEN]
    dev = root / "dev.json"
    dev.write_text("".join(json.dumps({"audio_filepath": str(path), "duration": soundfile.info(path).duration,
                                       "text": reference}) + "\n" for path, reference in zip(files, references)))
    nemo_texts = [hypothesis.text for hypothesis in nemo_transcribe(checkpoint, files, "transducer")]
    assert any(c.isupper() for text in nemo_texts for c in text), "the random model writes no capital"
    return {"model": checkpoint, "dev": dev, "references": references, "nemo_texts": nemo_texts, "root": root}


def test_lm_bias_keeps_case_and_punctuation_and_scores_both_ways(ray_cluster, cased_model, tmp_path):
    from jobs.lm_bias import main

    text = tmp_path / "domain.txt"
    text.write_text("\n".join(CASED_SENTENCES) + "\n", encoding="utf-8")
    phrases = tmp_path / "names.txt"
    phrases.write_text("rachel perkins\nparis\nNASA\n", encoding="utf-8")
    output = tmp_path / "bias"
    assert main(["--text", str(text), "--phrases", str(phrases), "--dev", str(cased_model["dev"]),
                 "--strategies", "greedy", "--orders", "3", "--model", str(cased_model["model"]),
                 "--cache-dir", str(tmp_path / "cache"), "--output", str(output)]) == 0
    report = json.loads((output / "report.json").read_text())
    assert report["normalisation_rules"][0].startswith("case kept")
    assert report["normalisation_rules"][1].startswith("digits kept")
    assert report["recased"] == [] and report["punctuated"]
    lm_text = (output / "lm" / "text.txt").read_text(encoding="utf-8").splitlines()
    assert lm_text == CASED_SENTENCES  # written as the model writes: nothing to change
    (greedy,) = report["strategies"]
    peer = error_rates(cased_model["references"], cased_model["nemo_texts"])
    assert greedy["baseline"]["wer"] == pytest.approx(peer.wer)
    assert greedy["baseline"]["written_wer"] == pytest.approx(peer.written_wer)
    assert greedy["baseline"]["cer"] == pytest.approx(peer.cer)
    assert greedy["baseline"]["written_cer"] == pytest.approx(peer.written_cer)
    markdown = (output / "report.md").read_text()
    assert "WER and CER are given normalised, then as written in brackets" in markdown
    assert "- case kept (the tokenizer writes capitals)" in markdown
    assert f"{peer.wer:.1%} ({peer.written_wer:.1%})" in markdown


def test_a_pseudo_labelling_run_that_keeps_nothing_is_a_report(ray_cluster, cased_model, tmp_path, capsys):
    from jobs.pseudo_label import main

    output = tmp_path / "labels"
    assert main(["--manifest", str(cased_model["dev"]), "--output", str(output), "--model",
                 str(cased_model["model"]), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu",
                 "--min-duration-s", "39", "--max-duration-s", "40"]) == 0
    (run,) = [p for p in next(output.glob("labels-*")).joinpath("runs").iterdir() if p.is_dir()]
    report = json.loads((run / "report.json").read_text())
    assert (report["new_utterances"], report["kept"], report["rejected"]) == (len(SPOKEN), 0, len(SPOKEN))
    assert (run / "train.json").read_text() == "" and (run / "labelled.txt").is_file()
    rejected = [json.loads(line) for line in (run / "rejected.json").read_text().splitlines()]
    assert sorted(line["text"] for line in rejected) == sorted(cased_model["nemo_texts"])
    peer = error_rates(cased_model["references"], cased_model["nemo_texts"])
    assert report["scores"]["all"]["wer"] == pytest.approx(peer.wer)
    assert report["scores"]["all"]["written_wer"] == pytest.approx(peer.written_wer)
    assert report["scores"]["kept"] is None and report["wer_kept"] is None
    markdown = (run / "report.md").read_text()
    assert "**No utterance was kept**" in markdown and "| kept | 0 | - | - |" in markdown
    assert "**No utterance was kept**" in capsys.readouterr().out  # the job prints its report
    assert Path(run / "confidence.png").read_bytes()[:4] == b"\x89PNG"
