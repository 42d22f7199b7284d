"""Recognition without NeMo: word building with NeMo 3.0's rules, CTC spans, and a fake model end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from decoders.ctc import CtcGreedy
from decoders.timestamps import ctc_frame_spans, label_frame_spans
from decoders.tiny_transducer import TinyTransducer, calibrate_blank_bias
from decoders.transducer_greedy import GreedyConfig, LabelLoopingGreedy
from pipeline.recognize import GreedyRecognizer, nemo_word_spans, pad_waveforms, recognize, refine_punctuation_spans

UNK_TEXT = " \u2047 "  # how SentencePiece writes <unk> back as text


def pieces_to_text(pieces):
    return "".join(UNK_TEXT if p == "<unk>" else p for p in pieces).replace("\u2581", " ").strip()


def words(pieces, spans, punctuation=frozenset()):
    texts = [pieces_to_text([p]) for p in pieces]
    found = nemo_word_spans(pieces, texts, spans, 0.08, pieces_to_text, frozenset(punctuation))
    return [(w.text, w.start_frame, w.end_frame) for w in found]


def test_ctc_spans_run_from_the_previous_token_to_the_first_frame():
    assert ctc_frame_spans([]) == []
    assert ctc_frame_spans([0]) == [(0, 0)]
    assert ctc_frame_spans([3, 4, 9]) == [(2, 3), (3, 4), (4, 9)]
    assert label_frame_spans([3, 4, 9], kind="ctc") == [(2, 3), (3, 4), (4, 9)]
    assert label_frame_spans([3, 4], [1, 2], kind="tdt") == [(3, 4), (4, 6)]


def test_words_open_at_pieces_that_change_when_decoded():
    pieces = ["\u2581he", "llo", "\u2581wor", "ld"]
    assert words(pieces, [(1, 2), (2, 3), (5, 6), (7, 8)]) == [("hello", 1, 3), ("world", 5, 8)]
    # a word ends where its last piece ends (a TDT piece of duration 0 can end before the one before it)
    assert words(["\u2581a", "b"], [(0, 3), (2, 2)]) == [("ab", 0, 2)]
    # <unk> decodes to " ⁇ ", so it opens a word; pieces without a marker at the start join the first word
    assert words(["a", "\u2581b", "<unk>", "c"], [(0, 1), (1, 2), (2, 3), (4, 5)]) == [
        ("a", 0, 1), ("b", 1, 2), ("\u2047 c", 2, 5)]
    # a lone "▁" opens a word (NeMo keeps it with empty text if nothing follows; we leave it out)
    assert words(["\u2581", "c", "\u2581"], [(0, 1), (2, 3), (6, 7)]) == [("c", 0, 3)]
    assert words([], []) == []


def test_punctuation_joins_the_word_before_it():
    pieces = ["\u2581hi", ",", "\u2581there", "."]
    spans = [(0, 1), (1, 2), (3, 4), (5, 6)]
    assert words(pieces, spans, {",", "."}) == [("hi,", 0, 2), ("there.", 3, 6)]
    assert words(pieces, spans) == [("hi,", 0, 2), ("there.", 3, 6)]  # joined anyway: "," has no marker
    # a mark that carries "▁" joins the open word too, space and all (NeMo's rule, followed as it is)
    assert words(["\u2581a", "\u2581,"], [(0, 1), (4, 5)], {","}) == [("a ,", 0, 5)]


def test_punctuation_spans_shrink_for_ctc_and_tdt_only():
    texts, spans = ["a", "."], [(0, 2), (3, 5)]
    assert refine_punctuation_spans(texts, spans, "rnnt", frozenset(".")) == spans
    assert refine_punctuation_spans(texts, spans, "ctc", frozenset(".")) == [(0, 2), (3, 3)]
    assert refine_punctuation_spans(texts, spans, "tdt", frozenset(".")) == [(0, 2), (2, 2)]
    assert refine_punctuation_spans([".", "a"], spans, "tdt", frozenset(".")) == spans  # never the first


class FakeTokenizer:
    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.punctuation = frozenset()

    def ids_to_pieces(self, ids):
        return [("\u2581" if i % 3 == 0 else "") + chr(ord("a") + i % 26) for i in ids]

    def pieces_to_text(self, pieces):
        return pieces_to_text(pieces)

    def ids_to_text(self, ids):
        return pieces_to_text(self.ids_to_pieces(ids))


class FakeCtcHead:
    def __init__(self, dim: int, vocab_size: int) -> None:
        self.vocab_size, self.blank_id = vocab_size, vocab_size
        self.weight = torch.randn(dim, vocab_size + 1, generator=torch.Generator().manual_seed(1))

    def log_probs(self, encoder_output):
        return (encoder_output @ self.weight).log_softmax(dim=-1)


class FakeAsrModel:
    """An `AsrModel` without NeMo: 'encoding' frames 160 samples into a fixed random projection."""

    kind, sample_rate, frame_shift_s, max_symbols = "hybrid_tdt_ctc", 16000, 0.01, 10
    heads = ("transducer", "ctc")

    def __init__(self) -> None:
        self.transducer = TinyTransducer(vocab_size=30, encoder_dim=16, durations=(0, 1, 2), seed=3)
        calibrate_blank_bias(self.transducer)
        self.ctc = FakeCtcHead(16, 30)
        self.tokenizer = FakeTokenizer(30)
        self.projection = torch.randn(160, 16, generator=torch.Generator().manual_seed(2))

    def encode(self, waveforms, lengths):
        frames = waveforms[:, : waveforms.shape[1] // 160 * 160].reshape(waveforms.shape[0], -1, 160)
        return frames @ self.projection, lengths // 160


def test_fake_model_end_to_end_matches_the_decoders_and_batching():
    model = FakeAsrModel()
    rng = np.random.default_rng(0)
    waveforms = [rng.standard_normal(n).astype(np.float32) for n in (1600, 4000, 320, 0, 2400)]
    audio, lengths = pad_waveforms(waveforms)
    assert audio.shape == (5, 4000) and lengths.tolist() == [1600, 4000, 320, 0, 2400]
    encoder_output, encoder_lengths = model.encode(audio, lengths)
    for head in model.heads:
        transcripts = recognize(model, waveforms, head=head)
        if head == "transducer":
            expected = LabelLoopingGreedy(model.transducer, GreedyConfig())(encoder_output, encoder_lengths)
        else:
            expected = CtcGreedy(model.ctc.blank_id)(model.ctc.log_probs(encoder_output), encoder_lengths)
        assert [t.tokens for t in transcripts] == [h.tokens for h in expected.to_list()]
        assert sum(len(t.tokens) for t in transcripts) > 0 and transcripts[3].tokens == []
        one_by_one = [recognize(model, [w], head=head)[0] for w in waveforms]
        assert [(t.tokens, t.frame_indices, t.durations, t.words) for t in one_by_one] == [
            (t.tokens, t.frame_indices, t.durations, t.words) for t in transcripts]
        for transcript in transcripts:
            assert transcript.text == model.tokenizer.ids_to_text(transcript.tokens)
            assert "".join(w.text for w in transcript.words) == transcript.text.replace(" ", "")
            assert all(w.start_s == pytest.approx(w.start_frame * 0.01) for w in transcript.words)
    with pytest.raises(ValueError, match="head"):
        GreedyRecognizer(model, "beam")
