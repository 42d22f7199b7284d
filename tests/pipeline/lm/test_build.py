"""Building token-level LMs from word-level text: SentencePiece -> lmplz or varikn -> normalized ARPA -> binary
(`pipeline/lm/build.py`; its command line in tests/jobs/test_build_lm.py)."""

from __future__ import annotations

import math
import random
import shutil

import pytest
import torch

from decoders.ngram.arpa import UNK_ID, id_to_token, write_arpa
from decoders.ngram.lm import NgramLm
from tests.decoders.ngram.arpa_factory import random_ngrams, random_token_sequences
from tests.reference.ngram import DictNgramLm

NAMES = "alice bob carol dave erin frank".split()
VERBS = "pays sends transfers owes lends".split()
AMOUNTS = "ten twenty fifty hundred thousand".split()


@pytest.fixture(scope="module")
def domain(tmp_path_factory):
    """A banking-command text and a SentencePiece model trained on it."""
    spm = pytest.importorskip("sentencepiece")
    folder = tmp_path_factory.mktemp("domain")
    rng = random.Random(0)
    text = folder / "train.txt"
    with open(text, "w", encoding="utf-8") as out:
        for _ in range(1500):
            out.write(f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(NAMES)} {rng.choice(AMOUNTS)} dollars\n")
    heldout = folder / "heldout.txt"
    heldout.write_text("alice pays bob ten dollars\nerin owes frank fifty dollars\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(folder / "tokenizer"), vocab_size=60,
                                   model_type="bpe", minloglevel=2)
    return folder, text, heldout, folder / "tokenizer.model"


def reference_perplexity(arpa_path, tokenizer_path, heldout_path) -> float:
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(tokenizer_path))
    reference = DictNgramLm(str(arpa_path))
    total, count = 0.0, 0
    for line in heldout_path.read_text(encoding="utf-8").splitlines():
        token_ids = processor.encode(line)
        total += reference.score(token_ids)
        count += len(token_ids) + 1
    return math.exp(-total / count)


@pytest.mark.parametrize("tool", ["varikn", "lmplz"])
def test_build_from_text(domain, tool):
    from pipeline.lm.build import build_lm, format_report

    if tool == "varikn":
        pytest.importorskip("varikn")
    elif shutil.which("lmplz") is None:
        pytest.skip("lmplz is not on PATH")
    folder, text, heldout, tokenizer = domain
    output, arpa = folder / f"{tool}.lm", folder / f"{tool}.arpa"
    report = build_lm([text], tokenizer, output, order=5, heldout=[heldout], arpa=arpa, tool=tool)
    assert report.tool == tool and report.order == 5 and report.vocab_size == 60
    assert len(report.ngram_counts) == 5 and all(count > 0 for count in report.ngram_counts)
    assert report.heldout_sentences == 2 and report.training_sentences == 1500
    # in-domain sentences are very likely under a model of this text
    assert 1.0 < report.heldout_perplexity < 5.0
    assert report.heldout_perplexity == pytest.approx(reference_perplexity(arpa, tokenizer, heldout), rel=1e-5)
    lm = NgramLm.load(output)
    assert lm.vocab_size == 60 and lm.max_order == 5
    assert "held-out perplexity" in format_report(report)
    kenlm = pytest.importorskip("kenlm")
    assert kenlm.Model(str(arpa)).order == 5  # the strict loader accepts the normalized file


def test_normalize_restores_pruned_contexts_and_unk(tmp_path):
    """A varikn-style file (spaces, <UNK>, dropped contexts) becomes one KenLM's probing loader accepts,
    with every probability unchanged."""
    from pipeline.lm.build import normalize_arpa

    rng = random.Random(4)
    ngrams = random_ngrams(rng, 5, 12, ngrams_per_order=60, drop_prefixes=0.4)
    raw = tmp_path / "raw.arpa"
    write_arpa(raw, ngrams)
    text = raw.read_text(encoding="utf-8").replace("\t", " ").replace(f" {id_to_token(UNK_ID)}\n", " <UNK>\n")
    raw.write_text(text, encoding="utf-8")
    fixed = tmp_path / "fixed.arpa"
    restored = normalize_arpa(raw, fixed)
    assert restored > 0
    original = tmp_path / "original.arpa"
    write_arpa(original, ngrams)
    sequences = random_token_sequences(rng, 12, 20, 12, ngrams)
    width = max(len(s) for s in sequences)
    tokens = torch.tensor([s + [0] * (width - len(s)) for s in sequences])
    lengths = torch.tensor([len(s) for s in sequences])
    expected = [DictNgramLm(str(original)).score(s) for s in sequences]
    assert NgramLm.from_arpa(fixed, 12).score_sequences(tokens, lengths).tolist() == pytest.approx(expected, abs=1e-4)
    kenlm = pytest.importorskip("kenlm")
    model = kenlm.Model(str(fixed))
    for sequence, value in zip(sequences, expected):
        sentence = " ".join(id_to_token(t) for t in sequence)
        assert model.score(sentence, bos=True, eos=True) * math.log(10) == pytest.approx(value, abs=1e-3)


def test_bad_arguments():
    from pipeline.lm.build import build_lm

    with pytest.raises(ValueError, match="order"):
        build_lm(["x"], "y", "z", order=11)
    with pytest.raises(ValueError, match="tool"):
        build_lm(["x"], "y", "z", tool="srilm")


def test_tokenizer_is_read_from_a_nemo_archive(domain, tmp_path):
    import tarfile

    from pipeline.lm.build import Tokenizer

    _, _, _, tokenizer = domain
    archive = tmp_path / "model.nemo"
    config = tmp_path / "model_config.yaml"  # the config names the tokenizer file the archive bundles
    config.write_text("tokenizer: {type: bpe, model_path: 'nemo:1f2e3d_tokenizer.model'}\n")
    with tarfile.open(archive, "w") as tar:  # NeMo's layout: the config, weights and `<hash>_tokenizer.model`
        tar.add(config, arcname="./model_config.yaml")
        tar.add(tokenizer, arcname="./1f2e3d_tokenizer.model")
        tar.add(tokenizer.with_suffix(".vocab"), arcname="./1f2e3d_tokenizer.vocab")
    sentence = "carol lends dave twenty dollars"
    assert Tokenizer(archive).encode(sentence) == Tokenizer(tokenizer).encode(sentence)
    assert Tokenizer(archive).vocab_size == 60
    empty = tmp_path / "no_tokenizer.nemo"
    with tarfile.open(empty, "w") as tar:  # the config names a tokenizer file the archive lacks
        tar.add(config, arcname="./model_config.yaml")
        tar.add(tokenizer.with_suffix(".vocab"), arcname="./1f2e3d_tokenizer.vocab")
    with pytest.raises(ValueError, match=r"no_tokenizer\.nemo: nemo:1f2e3d_tokenizer\.model is not inside the file"):
        Tokenizer(empty)
