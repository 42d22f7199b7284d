"""Word-level ARPA files: reading them as KenLM does, telling them from token-level ones, the two conversions to a
token LM (spelling out, and drawing sentences), and `--lm` with one: the cached conversion, and the bundled model
decoding the domain set with it."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
import torch

from decoders.ngram.arpa import BOS_ID, EOS_ID, UNK_ID, write_arpa
from decoders.ngram.lm import NgramLm
from decoders.ngram.word_lm import (
    WordArpa,
    arpa_level,
    read_word_arpa,
    sample_word_sentences,
    spell_word_lm,
    write_word_arpa,
)

REPOSITORY = Path(__file__).resolve().parents[3]
DOMAIN = REPOSITORY / "samples" / "domain"
LN10 = math.log(10.0)


def domain_lines(count: int, every: int = 1, offset: int = 0) -> list[str]:
    lines = (DOMAIN / "lm_text.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines[offset::every] if line.strip()][:count]


@pytest.fixture(scope="module")
def varikn_word_arpa(tmp_path_factory) -> Path:
    """A word-level trigram LM that varikn writes (its own spelling: spaces, <UNK>, pruned contexts), from 2,000
    lines of the domain text (every third line, so the others are held out)."""
    pytest.importorskip("varikn")
    from pipeline.lm.build import train_varikn

    work = tmp_path_factory.mktemp("varikn_words")
    text = work / "words.txt"
    text.write_text("\n".join(domain_lines(2000, every=3)) + "\n", encoding="utf-8")
    arpa = work / "words.arpa"
    train_varikn(text, arpa, 3, work, scale=0.001)
    return arpa


def kenlm_model(path: Path):
    kenlm = pytest.importorskip("kenlm")
    return kenlm.Model(str(path))


class ChunkTokenizer:
    """A stand-in for SentencePiece with the same shape: a word -> "▁" + its first two letters, then pairs of
    letters; pieces get ids as first seen."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, word: str) -> list[int]:
        chunks = ["\u2581" + word[:2]] + [word[i:i + 2] for i in range(2, len(word), 2)]
        return [self.ids.setdefault(chunk, len(self.ids)) for chunk in chunks]

    def sentence(self, words: list[str]) -> list[int]:
        return [token for word in words for token in self(word)]


def token_lm(tmp_path: Path, ngrams, vocab_size: int) -> NgramLm:
    path = tmp_path / "tokens.arpa"
    write_arpa(path, ngrams)
    return NgramLm.from_arpa(path, vocab_size)


def sentence_ln(lm: NgramLm, tokens: list[int]) -> float:
    return float(lm.score_sequences(torch.tensor([tokens]), torch.tensor([len(tokens)]))[0])


# --- reading --------------------------------------------------------------------------------------------------
def test_varikn_word_lm_scores_as_kenlm_scores_it(varikn_word_arpa, tmp_path):
    """varikn's file, read with its contexts restored and written in KenLM's spelling, is scored by KenLM as we
    score it, on held-out sentences with unknown words too."""
    lm = read_word_arpa(varikn_word_arpa)
    assert (UNK_ID,) in lm.ngrams and lm.max_order == 3  # varikn's <UNK> read as <unk>
    assert all(key[:-1] in lm.ngrams for key in lm.ngrams if len(key) > 1)  # every context listed
    kenlm_path = tmp_path / "kenlm_spelling.arpa"
    write_word_arpa(kenlm_path, lm)
    peer = kenlm_model(kenlm_path)
    ids = {word: i for i, word in enumerate(lm.words)}
    held_out = domain_lines(300, every=3, offset=1)
    unknown = 0
    for line in held_out:
        words = [ids.get(word, UNK_ID) for word in line.split()]
        unknown += UNK_ID in words
        assert lm.log10_sentence(words) == pytest.approx(peer.score(line, bos=True, eos=True), abs=1e-4)
    assert unknown > 0
    gzipped = tmp_path / "kenlm_spelling.arpa.gz"
    write_word_arpa(gzipped, lm)
    again = read_word_arpa(gzipped)  # and read back the same
    assert again.words == lm.words and again.ngrams.keys() == lm.ngrams.keys()
    assert all(again.ngrams[key] == pytest.approx(value, abs=1e-6) for key, value in lm.ngrams.items())


def test_a_written_word_lm_reads_back_the_same_with_its_declared_orders(tmp_path):
    """KenLM's spelling (tabs, `<unk>`, zero backoffs left out), and a declared order without n-grams kept."""
    path = tmp_path / "words.arpa"
    path.write_text("\\data\\\nngram 1=4\nngram 2=1\nngram 3=0\n\n\\1-grams:\n-1.5 <UNK>\n-99 <s> -0.3\n"
                    "-0.6 </s> 0\n-0.7 dog -0.1\n\n\\2-grams:\n-0.2 <s> dog -0.05\n\n\\3-grams:\n\n\\end\\\n")
    lm = read_word_arpa(path)
    written = tmp_path / "written.arpa"
    write_word_arpa(written, lm)
    assert "-0.6\t</s>\n" in written.read_text() and "<UNK>" not in written.read_text()
    again = read_word_arpa(written)
    assert (again.words, again.ngrams, again.max_order) == (lm.words, lm.ngrams, 3)
    assert again.log10_sentence([0]) == pytest.approx(-0.2 - 0.05 - 0.1 - 0.6)


def test_arpa_level_tells_words_from_tokens(tmp_path, varikn_word_arpa):
    token_arpa = tmp_path / "tokens.arpa"
    write_arpa(token_arpa, {(0,): (-1.0, 0.0), (1,): (-1.0, 0.0), (BOS_ID,): (-99.0, 0.0), (EOS_ID,): (-1.0, 0.0)})
    assert arpa_level(token_arpa, 2) == "token"
    assert arpa_level(varikn_word_arpa, 256) == "word"
    assert arpa_level(Path(__file__).parent / "data" / "lmplz_words_3gram.arpa.gz", 256) == "word"  # lmplz's
    # one-letter words are token symbols too ("x" is chr(120): token 20); a few of them change nothing
    few = tmp_path / "letters.arpa"
    few.write_text("\\data\\\nngram 1=5\n\n\\1-grams:\n-1\tx\n-1\ty\n-1\tcall\n-1\tmom\n-1\tnow\n\\end\\\n")
    assert arpa_level(few, 256) == "word"


# --- spelling out ---------------------------------------------------------------------------------------------
def test_spelling_single_token_words_gives_the_word_lm_back(varikn_word_arpa, tmp_path):
    """Where every word is one token and the token order is the word order, the spelled token LM is the word LM:
    its sentence scores are KenLM's word-level scores."""
    lm = read_word_arpa(varikn_word_arpa)
    ids = {word: i for i, word in enumerate(lm.words)}
    spelled = token_lm(tmp_path, spell_word_lm(lm, lambda word: [ids[word]], order=3), len(lm.words))
    peer = kenlm_model(_kenlm_copy(lm, tmp_path))
    for line in domain_lines(200, every=3):
        tokens = [ids[word] for word in line.split()]
        assert sentence_ln(spelled, tokens) == pytest.approx(peer.score(line, bos=True, eos=True) * LN10, abs=1e-3)


def _kenlm_copy(lm: WordArpa, tmp_path: Path) -> Path:
    path = tmp_path / "kenlm.arpa"
    write_word_arpa(path, lm)
    return path


def test_spelling_known_answers(tmp_path):
    """A unigram LM of "a" 0.4, "ab" 0.2, "c" 0.2, </s> 0.2 with "a" -> [0], "ab" -> [0, 1], "c" -> [2], as a
    token bigram: the unigrams are the expected token counts (0: 0.4 + 0.2, 1: 0.2, 2: 0.2, </s>: 0.2, over
    1.2), p(1 | 0) is the mass of "ab" over all words through token 0 (0.2 / 0.6), and the back-off weight of
    token 0 is what that leaves over what the unigram gives token 1: (2/3) / (5/6)."""
    path = tmp_path / "unigram.arpa"
    path.write_text("\\data\\\nngram 1=5\n\n\\1-grams:\n-99\t<s>\n{a}\ta\n{b}\tab\n{b}\tc\n{b}\t</s>\n\\end\\\n"
                    .format(a=math.log10(0.4), b=math.log10(0.2)), encoding="utf-8")
    spellings = {"a": [0], "ab": [0, 1], "c": [2]}
    ngrams = spell_word_lm(read_word_arpa(path), spellings.__getitem__, order=2)
    expected = {(0,): 0.5, (1,): 1 / 6, (2,): 1 / 6, (EOS_ID,): 1 / 6, (0, 1): 1 / 3}
    for key, probability in expected.items():
        assert ngrams[key][0] == pytest.approx(math.log10(probability), abs=1e-9), key
    assert ngrams[(0,)][1] == pytest.approx(math.log10((2 / 3) / (5 / 6)), abs=1e-9)
    assert {key for key in ngrams if len(key) == 2} == {(0, 1)}


def test_a_spelled_lm_sums_to_one_in_every_state(varikn_word_arpa, tmp_path):
    tokenizer = ChunkTokenizer()
    lm = read_word_arpa(varikn_word_arpa)
    ngrams = spell_word_lm(lm, tokenizer, order=5)
    spelled = token_lm(tmp_path, ngrams, len(tokenizer.ids))
    states = torch.arange(spelled.tensors.num_states)
    scores, _ = spelled.advance(states)
    total = torch.logsumexp(torch.cat([scores, spelled.final_scores(states)[:, None]], dim=1), dim=1)
    assert torch.allclose(total, torch.zeros_like(total), atol=1e-3)


def test_a_spelled_lm_scores_the_word_lms_own_sentences_as_the_word_lm(varikn_word_arpa, tmp_path):
    """Multi-token words, token order 8: sentences the word LM was estimated from (its n-grams listed) get its
    probability within 2% per token in perplexity (what is lost: token histories cut at 7 tokens). Where the
    word LM backs off, a token's back-off cannot follow a word's: held-out sentences lose about 27% here, the
    reason `--lm` draws sentences instead (benchmarks/word_lm.py)."""
    tokenizer = ChunkTokenizer()
    lm = read_word_arpa(varikn_word_arpa)
    spelled = token_lm(tmp_path, spell_word_lm(lm, tokenizer, order=8), len(tokenizer.ids))
    ids = {word: i for i, word in enumerate(lm.words)}
    word_total = token_total = tokens = 0.0
    for line in domain_lines(300, every=3):
        words = line.split()
        word_total += lm.log10_sentence([ids[word] for word in words]) * LN10
        sentence = tokenizer.sentence(words)
        token_total += sentence_ln(spelled, sentence)
        tokens += len(sentence) + 1
    assert tokens > 2000
    assert math.exp(-token_total / tokens) / math.exp(-word_total / tokens) == pytest.approx(1.0, abs=0.02)


# --- drawing sentences ------------------------------------------------------------------------------------------
def test_drawn_sentences_follow_the_back_off_formula(tmp_path):
    """A bigram LM with one context listing two words: after "a" those two come with their probabilities, and
    every other word with the back-off mass shared as the unigrams say; `<unk>` is never drawn (as if the word LM
    were renormalised without it)."""
    unigrams = {"a": 0.3, "b": 0.2, "c": 0.1, "</s>": 0.3, "<unk>": 0.1}
    after_a = {"b": 0.5, "</s>": 0.2}
    lines = [f"{math.log10(p)}\t{w}" for w, p in unigrams.items()] + ["-99\t<s>"]
    backoff = math.log10((1 - 0.7) / (1 - unigrams["b"] - unigrams["</s>"]))
    lines[0] += f"\t{backoff}"
    bigrams = [f"{math.log10(p)}\ta {w}" for w, p in after_a.items()]
    path = tmp_path / "bigram.arpa"
    path.write_text("\\data\\\nngram 1=6\nngram 2=2\n\n\\1-grams:\n" + "\n".join(lines) + "\n\n\\2-grams:\n"
                    + "\n".join(bigrams) + "\n\\end\\\n", encoding="utf-8")
    lm = read_word_arpa(path)
    following: Counter[str] = Counter()
    firsts: Counter[str] = Counter()
    for sentence in sample_word_sentences(lm, 40_000, seed=3):
        assert "<unk>" not in sentence
        firsts[sentence[0] if sentence else "</s>"] += 1
        for word, after in zip(sentence, sentence[1:] + ["</s>"]):
            if word == "a":
                following[after] += 1
    n = sum(following.values())
    # the back-off mass 0.3 over the words not listed after "a" that can be drawn (a, c; <unk> never is)
    exact = {"b": 0.5, "</s>": 0.2, "a": 0.3 * 0.3 / 0.4, "c": 0.3 * 0.1 / 0.4}
    for word, probability in exact.items():
        assert following[word] / n == pytest.approx(probability, abs=4 * math.sqrt(probability / n))
    # from <s> (no bigrams): the unigrams without <unk>, renormalised
    m = sum(firsts.values())
    for word in ("a", "b", "c", "</s>"):
        probability = unigrams[word] / 0.9
        assert firsts[word] / m == pytest.approx(probability, abs=4 * math.sqrt(probability / m))


def test_drawing_is_reproducible(varikn_word_arpa):
    lm = read_word_arpa(varikn_word_arpa)
    first = list(sample_word_sentences(lm, 50, seed=7))
    assert first == list(sample_word_sentences(lm, 50, seed=7)) != list(sample_word_sentences(lm, 50, seed=8))
    assert all(word in set(lm.words) for sentence in first for word in sentence)


# --- `--lm` with a word-level ARPA: the cache and the pipeline ----------------------------------------------------
@pytest.fixture
def fewer_sentences(monkeypatch):
    """Conversions that draw 3,000 sentences (not 100,000 or more): the same code, at a test's scale."""
    import pipeline.lm.word_arpa

    monkeypatch.setattr(pipeline.lm.word_arpa, "MIN_SENTENCES", 3000)
    monkeypatch.setattr(pipeline.lm.word_arpa, "SENTENCES_PER_NGRAM", 0)


@pytest.fixture(scope="module")
def speller():
    from pipeline.config import BUNDLED_MODEL
    from pipeline.lm.word_arpa import model_speller

    return model_speller(str(BUNDLED_MODEL))


def test_the_converted_lm_is_cached_and_reused(varikn_word_arpa, speller, tmp_path, monkeypatch, fewer_sentences):
    import decoders.ngram.word_lm
    from pipeline.io.cache import word_lms_dir
    from pipeline.lm.word_arpa import load_word_arpa

    calls = []
    draw = decoders.ngram.word_lm.sample_word_sentences

    def counted(*args, **kwargs):
        calls.append(args)
        return draw(*args, **kwargs)

    monkeypatch.setattr(decoders.ngram.word_lm, "sample_word_sentences", counted)
    cache = tmp_path / "cache"
    first = load_word_arpa(varikn_word_arpa, speller, 256, cache)
    second = load_word_arpa(varikn_word_arpa, speller, 256, cache)
    assert len(calls) == 1  # the second load read the cached binary
    assert len(list(word_lms_dir(cache).glob("*.lm"))) == 1
    assert torch.equal(first.tensors.arc_weights, second.tensors.arc_weights)
    # other bytes are another LM
    changed = tmp_path / "changed.arpa"
    changed.write_bytes(varikn_word_arpa.read_bytes().replace(b"\\end\\", b"\n\\end\\"))
    load_word_arpa(changed, speller, 256, cache)
    assert len(calls) == 2 and len(list(word_lms_dir(cache).glob("*.lm"))) == 2


def test_load_language_model_tells_and_converts_a_word_level_arpa(varikn_word_arpa, speller, tmp_path,
                                                                  fewer_sentences):
    from pipeline.config import BUNDLED_MODEL
    from pipeline.decoding.fusion import lm_problem, load_language_model
    from pipeline.decoding.plan import DecodingConfig, plan_decoding
    from pipeline.model.nemo_file import read_model_facts

    facts = read_model_facts(BUNDLED_MODEL)
    decoding = DecodingConfig(lm_uri=str(varikn_word_arpa), lm_weight=0.5)
    plan = plan_decoding(facts, decoding)
    with pytest.raises(ValueError, match="word-level ARPA: converting it needs the model's tokenizer"):
        load_language_model(plan, 256, str(tmp_path / "cache"))
    lm = load_language_model(plan, 256, str(tmp_path / "cache"), tokenizer=speller.processor)
    assert lm.vocab_size == 256 and lm.max_order == 6
    assert lm_problem(str(varikn_word_arpa), 256) is None  # the driver's check lets it through
    forced = plan_decoding(facts, DecodingConfig(lm_uri=str(varikn_word_arpa), lm_weight=0.5, lm_level="token"))
    with pytest.raises(ValueError, match="word-level ARPA"):  # read as tokens, the words are refused
        load_language_model(forced, 256, str(tmp_path / "cache"), tokenizer=speller.processor)
    with pytest.raises(ValueError, match="lm_level must be one of auto, token or word"):
        DecodingConfig(lm_level="words")
    broken = tmp_path / "broken.arpa"
    broken.write_text(varikn_word_arpa.read_text().replace("\\2-grams:", "\\two-grams:"), encoding="utf-8")
    assert "an unknown section" in lm_problem(str(broken), 256)


@pytest.mark.nemo
@pytest.mark.slow
def test_the_bundled_model_decodes_the_domain_set_better_with_a_word_level_arpa(tmp_path):
    """`load_language_model` with a word-level ARPA of the domain text (varikn, trigram) and the bundled model:
    greedy and ALSD decode the domain dev set with a lower WER than without an LM."""
    import jiwer
    import soundfile

    pytest.importorskip("varikn")
    from pipeline.config import BUNDLED_MODEL
    from pipeline.decoding.fusion import load_language_model
    from pipeline.decoding.plan import DecodingConfig, decode_in_process, plan_decoding
    from pipeline.decoding.recognize import pad_waveforms
    from pipeline.lm.build import train_varikn
    from pipeline.model.nemo import load_asr_model

    text = tmp_path / "words.txt"
    text.write_text((DOMAIN / "lm_text.txt").read_text(encoding="utf-8"), encoding="utf-8")
    arpa = tmp_path / "domain.arpa"
    train_varikn(text, arpa, 3, tmp_path, scale=0.001)
    model = load_asr_model(str(BUNDLED_MODEL))
    import json

    rows = [json.loads(line) for line in (DOMAIN / "dev.json").read_text().splitlines()]
    waveforms, lengths = pad_waveforms([soundfile.read(DOMAIN / r["audio_filepath"], dtype="float32")[0]
                                        for r in rows])
    with torch.no_grad():
        encoder_output, encoder_lengths = model.encode(waveforms, lengths)
    references = [r["text"] for r in rows]
    for strategy in ("greedy", "alsd"):
        wers = []
        for weight in (0.0, 0.5):
            decoding = DecodingConfig(strategy=strategy, lm_uri=str(arpa) if weight else None, lm_weight=weight)
            plan = plan_decoding(model.facts, decoding)
            lm = load_language_model(plan, plan.lm_vocab_size(model), str(tmp_path / "cache"),
                                     tokenizer=model.tokenizer)
            hypotheses = decode_in_process(model, plan, lm)(encoder_output, encoder_lengths)
            wers.append(jiwer.wer(references, [model.tokenizer.ids_to_text(h.tokens) for h in hypotheses]))
        assert wers[1] < 0.75 * wers[0], (strategy, wers)
