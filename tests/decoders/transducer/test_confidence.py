"""Confidence of a searched transducer hypothesis (decoders/transducer/confidence.py): equal to what greedy decoding
measures on its own label steps, and to a slow per-utterance teacher-forced reference for beam search answers."""

from __future__ import annotations

import pytest
import torch

from decoders.confidence import ConfidenceConfig, ConfidenceMethodConfig, step_confidence
from decoders.transducer.beam import AesBeamSearch, AlsdBeamSearch, BeamSearchConfig
from decoders.transducer.confidence import hypothesis_confidence
from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy
from tests.decoders.test_confidence import tiny_model

CONFIGS = [
    ConfidenceConfig(),
    ConfidenceConfig(aggregation="max", tdt_include_duration=True,
                     method_cfg=ConfidenceMethodConfig(entropy_type="gibbs", alpha=1.0, entropy_norm="lin")),
    ConfidenceConfig(method_cfg=ConfidenceMethodConfig(name="max_prob", alpha=0.5)),
]


def batch(seed: int = 7):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([0, 1, 9, 25, 30, 14])
    return torch.randn(len(lengths), 30, 8, generator=generator, dtype=torch.double), lengths


@pytest.mark.parametrize("kind", ["rnnt", "tdt"])
@pytest.mark.parametrize("config", CONFIGS, ids=range(len(CONFIGS)))
def test_on_greedy_answers_it_equals_what_greedy_measures(kind, config):
    model = tiny_model(kind)
    encoder_output, lengths = batch()
    hypotheses = LabelLoopingGreedy(model, GreedyConfig(max_symbols=3), confidence=config)(encoder_output, lengths)
    recomputed = hypothesis_confidence(model, encoder_output, hypotheses, config)
    for b in range(len(lengths)):
        n = int(hypotheses.token_lengths[b])
        torch.testing.assert_close(recomputed[b, :n], hypotheses.token_confidence[b, :n].to(recomputed.dtype),
                                   atol=1e-9, rtol=1e-9)
        assert (recomputed[b, n:] == 0).all()


@torch.no_grad()
def reference_confidence(model, encoder_output, tokens, frames, config):
    """One utterance, one label at a time: the prediction after the labels before, the joint at the label's frame."""
    encoder_projected = model.project_encoder(encoder_output.unsqueeze(0))[0]
    blank = torch.tensor([model.blank_id])
    prediction, state = model.predict(blank, model.initial_state(1, encoder_output.device, encoder_output.dtype))
    values = []
    for token, frame in zip(tokens, frames):
        logits = model.joint_after_projection(encoder_projected[frame].unsqueeze(0),
                                              model.project_prediction(prediction))[0]
        values.append(float(step_confidence(logits, model.vocab_size + 1, config, len(model.durations) > 0)))
        prediction, state = model.predict(torch.tensor([token]), state)
    return values


@pytest.mark.parametrize("search", [AlsdBeamSearch, AesBeamSearch])
@pytest.mark.parametrize("kind", ["rnnt", "tdt"])
def test_on_beam_answers_it_equals_a_per_utterance_reference(search, kind):
    model = tiny_model(kind)
    encoder_output, lengths = batch(11)
    config = CONFIGS[1]
    hypotheses = search(model, BeamSearchConfig(beam_size=3, max_symbols_per_frame=3))(encoder_output, lengths)
    confidence = hypothesis_confidence(model, encoder_output, hypotheses, config)
    labels = 0
    for b, h in enumerate(hypotheses.to_list()):
        expected = reference_confidence(model, encoder_output[b], h.tokens, h.frame_indices, config)
        assert confidence[b, :len(h.tokens)].tolist() == pytest.approx(expected, abs=1e-9)
        assert all(0.0 <= c <= 1.0 for c in expected)
        labels += len(h.tokens)
    assert labels >= 4  # the answers hold labels to measure


def test_blank_steps_cannot_be_folded_in():
    model = tiny_model("rnnt")
    encoder_output, lengths = batch()
    hypotheses = LabelLoopingGreedy(model, GreedyConfig(max_symbols=3))(encoder_output, lengths)
    with pytest.raises(ValueError, match="exclude_blank"):
        hypothesis_confidence(model, encoder_output, hypotheses, ConfidenceConfig(exclude_blank=False))
