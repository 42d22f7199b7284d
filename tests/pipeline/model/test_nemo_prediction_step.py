"""The NeMo adapter's own steps on the CPU: the prediction network run with the LSTM's weights (`_LstmStep`)
and the joint without module calls, against NeMo's `predict` and `joint_after_projection`.

Peers: NeMo's `RNNTDecoder.predict` (one oneDNN `nn.LSTM` step) and `RNNTJoint` on random weights, 1 and 2
LSTM layers, several steps in a row from the start-of-sequence blank. The two differ by rounding only, so
they are compared with a tolerance; that greedy tokens stay NeMo's is checked end to end by
`test_models_nemo.py` and `tests/test_bundled_model.py`.
"""

from __future__ import annotations

import pytest
import torch

from pipeline.model.nemo import NemoTransducer

pytestmark = pytest.mark.nemo

VOCAB_SIZE = 40


def _transducer(layers: int = 1, normalization_mode: str | None = None, seed: int = 0) -> NemoTransducer:
    from nemo.collections.asr.modules import RNNTDecoder, RNNTJoint

    torch.manual_seed(seed)
    dropout = 0.1 if layers > 1 else 0.0  # between layers only; NeMo's layer-normalized LSTM takes none
    decoder = RNNTDecoder(prednet={"pred_hidden": 48, "pred_rnn_layers": layers, "dropout": dropout},
                          vocab_size=VOCAB_SIZE, normalization_mode=normalization_mode)
    joint = RNNTJoint(jointnet={"encoder_hidden": 24, "pred_hidden": 48, "joint_hidden": 32, "activation": "relu",
                                "dropout": 0.1}, num_classes=VOCAB_SIZE)
    return NemoTransducer(decoder.eval(), joint.eval())


def _nemo_predict(model: NemoTransducer, labels, state):
    output, next_state, *_ = model.decoder.predict(labels.unsqueeze(1), list(state), add_sos=False,
                                                   batch_size=labels.shape[0])
    return output[:, 0], tuple(next_state)


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("batch_size", [1, 5])
@torch.no_grad()
def test_lstm_step_follows_nemo_predict(layers, batch_size):
    model = _transducer(layers)
    assert model._lstm_step is not None
    generator = torch.Generator().manual_seed(layers)
    ours = theirs = model.initial_state(batch_size, "cpu", torch.float32)
    labels = torch.full((batch_size,), model.blank_id)
    for _ in range(6):
        our_output, ours = model.predict(labels, ours)
        their_output, theirs = _nemo_predict(model, labels, theirs)
        torch.testing.assert_close(our_output, their_output, atol=1e-5, rtol=1e-5)
        for our_state, their_state in zip(ours, theirs):
            assert our_state.shape == their_state.shape == (layers, batch_size, 48)
            torch.testing.assert_close(our_state, their_state, atol=1e-5, rtol=1e-5)
        labels = torch.randint(0, VOCAB_SIZE + 1, (batch_size,), generator=generator)  # the blank included


@torch.no_grad()
def test_lstm_step_sees_weights_written_after_its_first_step():
    model = _transducer()
    state = model.initial_state(3, "cpu", torch.float32)
    labels = torch.tensor([0, 7, VOCAB_SIZE])
    model.predict(labels, state)  # builds the label -> input gates table
    lstm = model.decoder.prediction["dec_rnn"].lstm
    lstm.load_state_dict({name: value * 0.5 for name, value in lstm.state_dict().items()})
    model.decoder.prediction["embed"].weight.mul_(2.0)
    torch.testing.assert_close(model.predict(labels, state)[0], _nemo_predict(model, labels, state)[0],
                               atol=1e-5, rtol=1e-5)


def test_no_lstm_step_where_the_network_is_not_a_plain_lstm():
    assert _transducer(normalization_mode="layer")._lstm_step is None  # NeMo's layer-normalized LSTM


@torch.no_grad()
def test_joint_and_projection_equal_nemo():
    model = _transducer()
    generator = torch.Generator().manual_seed(3)
    encoder_output = torch.randn(4, 6, 24, generator=generator)
    prediction = torch.randn(4, 48, generator=generator)
    encoder_projected = model.project_encoder(encoder_output)  # [B, T, H]
    prediction_projected = model.project_prediction(prediction)  # [B, H]
    torch.testing.assert_close(prediction_projected, model.joint.project_prednet(prediction), atol=0, rtol=0)
    logits = model.joint_after_projection(encoder_projected, prediction_projected.unsqueeze(1))  # [B, T, V]
    # NeMo's joint on [B, T, 1, H] returns log-softmax on the CPU: the same up to a per-row constant
    nemo = model.joint.joint_after_projection(encoder_projected, prediction_projected.unsqueeze(1))[:, :, 0]
    torch.testing.assert_close(torch.log_softmax(logits, dim=-1), nemo, atol=1e-6, rtol=1e-6)
