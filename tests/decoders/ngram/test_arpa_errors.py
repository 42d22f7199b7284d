"""Malformed ARPA files get an `ArpaFormatError` naming the file and the line, from the token-level reader and
the word-level one alike; the spellings KenLM, SRILM and varikn write are read."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest

from decoders.ngram.arpa import BOS_ID, EOS_ID, UNK_ID, ArpaFormatError, read_arpa
from decoders.ngram.word_lm import read_word_arpa

# "d", "e", "f" are tokens 0, 1, 2 (chr(id + 100)) and words alike, so each text serves both readers
GOOD_BODY = "\\1-grams:\n-1\td\t-0.5\n-1\te\n\n"
MALFORMED = {
    "no \\data\\ header": ("ngram 1=2\n\n\\1-grams:\n-1\td\n-1\te\n\\end\\\n", r":1: expected '\\data\\'"),
    "a section before any header": ("\\1-grams:\n-1\td\n\\end\\\n", r":1: no '\\data\\' header"),
    "no counts": ("\\data\\\n\n\\1-grams:\n-1\td\n\\end\\\n", r":3: no 'ngram N=count' lines"),
    "a broken count line": ("\\data\\\nngram one=2\n\n\\1-grams:\n", r":2: a broken header line"),
    "a count declared twice": ("\\data\\\nngram 1=2\nngram 1=2\n", r":3: .*declared twice"),
    "orders not 1..N": ("\\data\\\nngram 1=2\nngram 3=1\n\n" + GOOD_BODY + "\\end\\\n",
                        r":5: declared orders must be 1..N"),
    "the 2-grams section missing": ("\\data\\\nngram 1=2\nngram 2=1\n\n" + GOOD_BODY + "\\end\\\n",
                                    r":9: \\end\\ after the 1-grams section; the header declares 2 orders"),
    "the 1-grams section missing": ("\\data\\\nngram 1=2\nngram 2=1\n\n\\2-grams:\n-1\td e\n\\end\\\n",
                                    r":5: expected section \\1-grams:"),
    "fewer entries than declared": ("\\data\\\nngram 1=3\n\n" + GOOD_BODY + "\\end\\\n",
                                    r":8: the 1-grams section holds 2 entries but the header declares 3"),
    "more entries than declared": ("\\data\\\nngram 1=1\nngram 2=1\n\n" + GOOD_BODY + "\\2-grams:\n-1\td e\n"
                                   "\\end\\\n", r":9: the 1-grams section holds 2 entries but the header declares 1"),
    "too few fields": ("\\data\\\nngram 1=1\n\n\\1-grams:\n-1.0\n\\end\\\n",
                       r":5: a 1-gram line needs 2 or 3 fields, got 1: '-1.0'"),
    "too many fields": ("\\data\\\nngram 1=2\nngram 2=1\n\n" + GOOD_BODY + "\\2-grams:\n-1\td e f g\n\\end\\\n",
                        r":10: a 2-gram line needs 3 or 4 fields, got 5"),
    "a probability that is not a number": ("\\data\\\nngram 1=2\n\n\\1-grams:\n-1\td\nminus\te\n\\end\\\n",
                                           r":6: probability and backoff must be numbers: 'minus\\te'"),
    "a backoff that is not a number": ("\\data\\\nngram 1=1\n\n\\1-grams:\n-1\td\t0.1x\n\\end\\\n",
                                       r":5: probability and backoff must be numbers"),
    "a positive log probability": ("\\data\\\nngram 1=1\n\n\\1-grams:\n0.5\td\n\\end\\\n",
                                   r":5: log10 probability must be <= 0"),
    "nan": ("\\data\\\nngram 1=1\n\n\\1-grams:\nnan\td\n\\end\\\n", r":5: log10 probability must be <= 0"),
    "an unknown section in the header": ("\\data\\\nngram 1=1\n\\info:\n", r":3: an unknown section"),
    "an unknown section among the n-grams": ("\\data\\\nngram 1=2\n\n" + GOOD_BODY + "\\unigrams:\n\\end\\\n",
                                             r":8: an unknown section"),
    "a section without its colon": ("\\data\\\nngram 1=2\nngram 2=1\n\n" + GOOD_BODY + "\\2-grams\n-1\td e\n"
                                    "\\end\\\n", r":9: an unknown section"),
    "no \\end\\": ("\\data\\\nngram 1=2\n\n" + GOOD_BODY, r":7: the file ends before '\\end\\'"),
    "an empty file": ("", r"no ARPA header"),
}
READERS = {"token": read_arpa, "word": read_word_arpa}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_arpa_is_refused_naming_the_file_and_line(tmp_path, reader, name):
    text, message = MALFORMED[name]
    path = tmp_path / "bad.arpa"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ArpaFormatError, match=message) as caught:
        READERS[reader](path)
    assert str(caught.value).startswith(f"{path}:")


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_gzip_arpa_error_names_the_gzip_file(tmp_path, reader):
    path = tmp_path / "bad.arpa.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write("\\data\\\nngram 1=3\n\n" + GOOD_BODY + "\\end\\\n")
    with pytest.raises(ArpaFormatError, match=rf"^{path}:8: the 1-grams section holds 2"):
        READERS[reader](path)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_text_that_is_not_utf8_is_refused_naming_the_line(tmp_path, reader):
    path = tmp_path / "latin1.arpa"
    path.write_bytes(b"\\data\\\nngram 1=1\n\n\\1-grams:\n-1\t\xe9t\xe9\n\\end\\\n")
    with pytest.raises(ArpaFormatError, match=r":5: not UTF-8"):
        READERS[reader](path)


# what the tools write: KenLM's lmplz (tabs, <unk> first with a 0 backoff on every line of a lower order, <s> at
# -99 in SRILM's manner or 0), varikn (spaces, <UNK>, <s> with a probability, backoffs left out, contexts pruned)
KENLM_STYLE = ("\\data\\\nngram 1=5\nngram 2=3\n\n\\1-grams:\n-1.5\t<unk>\t0\n-99\t<s>\t-0.30103\n"
               "-0.60206\t</s>\t0\n-0.69897\tdog\t-0.1\n-0.69897\tcat\t-0.2\n\n\\2-grams:\n-0.1\t<s> dog\n"
               "-0.2\tdog </s>\n-0.3\tcat </s>\n\n\\end\\\n")
VARIKN_STYLE = ("\\data\\\nngram 1=4\nngram 2=2\nngram 3=1\n\n\\1-grams:\n-1.9 <UNK>\n-1.2 <s> -0.5\n"
                "-0.6 </s>\n-0.3 dog -0.25\n\n\\2-grams:\n-0.2 <s> dog -0.1\n-0.4 dog </s>\n\n\\3-grams:\n"
                "-0.05 dog dog </s>\n\n\\end\\\n")


def test_kenlm_spelling_is_read(tmp_path):
    path = tmp_path / "kenlm.arpa"
    path.write_text(KENLM_STYLE, encoding="utf-8")
    lm = read_word_arpa(path)
    assert lm.words == ["dog", "cat"] and lm.max_order == 2
    assert lm.ngrams[(UNK_ID,)] == (-1.5, 0.0) and lm.ngrams[(BOS_ID,)] == (-99.0, -0.30103)
    assert lm.ngrams[(BOS_ID, 0)] == (-0.1, 0.0)
    # <s> cat </s>: no "<s> cat", so backoff(<s>) + p(cat), then "cat </s>"
    assert lm.log10_sentence([1]) == pytest.approx(-0.30103 - 0.69897 - 0.3)
    assert lm.log10_sentence([2**20]) == pytest.approx(-0.30103 - 1.5 - 0.60206)  # an unknown word: <unk>


def test_varikn_spelling_is_read_and_its_pruned_contexts_restored(tmp_path):
    path = tmp_path / "varikn.arpa"
    path.write_text(VARIKN_STYLE, encoding="utf-8")
    lm = read_word_arpa(path)
    assert lm.ngrams[(UNK_ID,)] == (-1.9, 0.0)  # <UNK> is <unk>
    assert lm.ngrams[(BOS_ID,)] == (-1.2, -0.5)  # a probability for <s> is accepted (and never used)
    assert lm.ngrams[(EOS_ID,)] == (-0.6, 0.0)  # no backoff written: 0
    # "dog dog" was pruned but is the context of "dog dog </s>": restored with its backed-off probability
    assert lm.ngrams[(0, 0)] == pytest.approx((-0.25 - 0.3, 0.0))
    assert lm.log10_sentence([0, 0]) == pytest.approx(-0.2 + (-0.1 - 0.25 - 0.3) + (-0.05))


def test_crlf_blank_lines_and_trailing_spaces_are_accepted(tmp_path):
    path = tmp_path / "dos.arpa"
    path.write_bytes(KENLM_STYLE.replace("\n", " \r\n").replace("\\data\\", "\r\n\\data\\").encode())
    assert read_word_arpa(path).ngrams == read_word_arpa_text(tmp_path, KENLM_STYLE).ngrams


def read_word_arpa_text(tmp_path, text):
    path = tmp_path / "plain.arpa"
    path.write_text(text, encoding="utf-8")
    return read_word_arpa(path)


def test_minus_99_and_minus_infinity_read_as_impossible(tmp_path):
    lm = read_word_arpa_text(tmp_path, "\\data\\\nngram 1=3\n\n\\1-grams:\n-99\t<s>\n-inf\tcat\n0\t</s>\n\\end\\\n")
    assert lm.ngrams[(BOS_ID,)][0] == -99.0 and lm.ngrams[(0,)][0] == -math.inf


# written by KenLM's lmplz 0.3.0 (built from the pip source package), every 50th of the first 4,000 lines of
# samples/domain/lm_text.txt:
#   sed -n '1~50p' samples/domain/lm_text.txt | head -80 | lmplz -o 3 --discount_fallback | gzip -9 -n
LMPLZ_FILE = Path(__file__).parent / "data" / "lmplz_words_3gram.arpa.gz"


def test_a_file_lmplz_wrote_is_read_as_kenlm_reads_it(tmp_path):
    """lmplz's own spelling (tabs, `<unk>` first, `0` for `<s>`, `0` back-offs written out), gzip: our word-level
    reading scores sentences as KenLM does, sentences of the training text and others with unknown words."""
    kenlm = pytest.importorskip("kenlm")
    lm = read_word_arpa(LMPLZ_FILE)
    assert lm.max_order == 3 and lm.ngrams[(BOS_ID,)][0] == 0.0 and (UNK_ID,) in lm.ngrams
    plain = tmp_path / "lmplz.arpa"
    with gzip.open(LMPLZ_FILE, "rb") as source:
        plain.write_bytes(source.read())
    peer = kenlm.Model(str(plain))
    ids = {word: i for i, word in enumerate(lm.words)}
    lines = (Path(__file__).resolve().parents[3] / "samples" / "domain" / "lm_text.txt").read_text().splitlines()
    unknown = 0
    for line in lines[:4000:50][:80] + lines[1:4000:50][:80]:
        words = [ids.get(word, UNK_ID) for word in line.split()]
        unknown += UNK_ID in words
        assert lm.log10_sentence(words) == pytest.approx(peer.score(line, bos=True, eos=True), abs=1e-5)
    assert unknown > 10
