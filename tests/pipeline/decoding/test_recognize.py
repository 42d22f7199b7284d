"""Recognition without NeMo: a fake model end to end, through both heads, batched and one by one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from decoders.ctc.greedy import CtcGreedy
from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy
from decoders.transducer.tiny import TinyTransducer, calibrate_blank_bias
from pipeline.decoding.recognize import GreedyRecognizer, pad_waveforms, recognize
from pipeline.model.nemo_file import ModelFacts
from tests.decoders.test_timestamps import pieces_to_text


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
    facts = ModelFacts(kind=kind, durations=(0, 1, 2), sample_rate=sample_rate, max_symbols=max_symbols)
    device = torch.device("cpu")

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


def test_pad_waveforms_takes_read_only_arrays_and_tensors():
    read_only = np.arange(3, dtype=np.float32)
    read_only.setflags(write=False)  # as Arrow hands column buffers out
    audio, lengths = pad_waveforms([read_only, torch.tensor([5.0]), np.zeros(0, np.float64)])
    assert audio.tolist() == [[0.0, 1.0, 2.0], [5.0, 0.0, 0.0], [0.0, 0.0, 0.0]] and lengths.tolist() == [3, 1, 0]
    assert audio.dtype == torch.float32
    with pytest.raises(ValueError, match=r"waveforms\[0\] must be 1-D"):
        pad_waveforms([np.zeros((2, 2))])
