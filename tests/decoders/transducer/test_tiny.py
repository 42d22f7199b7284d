from __future__ import annotations

import torch

from decoders.protocols import TransducerModel
from decoders.transducer.tiny import TinyTransducer, calibrate_blank_bias, emission_rate


def test_implements_the_protocol_and_blank_is_last():
    model = TinyTransducer(vocab_size=10, durations=(0, 1, 2))
    assert isinstance(model, TransducerModel)
    assert model.blank_id == 10
    logits = model.joint_after_projection(model.project_encoder(torch.randn(2, 3, 64)),
                                          model.project_prediction(torch.randn(2, 1, 64)))
    assert logits.shape == (2, 3, 10 + 1 + 3)
    # blank embeds to zeros (NeMo's blank-as-pad), so the start of sequence carries no label identity
    assert torch.equal(model.embedding.weight[10], torch.zeros(64))


def test_same_seed_same_model():
    a, b = TinyTransducer(seed=4), TinyTransducer(seed=4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_calibration_gives_a_realistic_emission_rate():
    model = TinyTransducer(vocab_size=16, encoder_dim=32, prediction_dim=32, joint_dim=32, seed=2)
    assert emission_rate(model) > 1.0  # drawn at random, it emits on nearly every joint call
    calibrate_blank_bias(model, frames_per_label=3.0)
    rate = emission_rate(model, frames=256, seed=9)  # held-out input
    assert 1 / 5 < rate < 1 / 2


def test_state_replace_and_select():
    model = TinyTransducer(vocab_size=5, prediction_dim=4)
    destination = model.initial_state(3)
    source = tuple(torch.ones_like(s) for s in destination)
    model.replace_states_(destination, source, torch.tensor([False, True, False]))
    assert destination[0][0, :, 0].tolist() == [0.0, 1.0, 0.0]
    selected = model.select_states(destination, torch.tensor([1, 1]))
    assert selected[1].shape == (1, 2, 4) and selected[1].sum() == 8


def test_predict_steps_the_lstm_exactly():
    model = TinyTransducer(vocab_size=7, prediction_dim=8, prediction_layers=2, seed=5)
    labels = torch.tensor([7, 3, 0])
    state = tuple(torch.randn_like(s) for s in model.initial_state(3))
    output, (hidden, cell) = model.predict(labels, state)
    expected, (expected_hidden, expected_cell) = model.lstm(model.embedding(labels).unsqueeze(1), state)
    assert torch.allclose(output, expected[:, 0], atol=1e-6)
    assert torch.allclose(hidden, expected_hidden, atol=1e-6) and torch.allclose(cell, expected_cell, atol=1e-6)
