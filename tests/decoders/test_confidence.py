"""Batched confidence (decoders/confidence.py, carried by the greedy decoders) against the per-utterance
reference (tests/reference/confidence.py), for every measure and aggregation."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch

from decoders.confidence import (
    ConfidenceConfig,
    ConfidenceMethodConfig,
    sentencepiece_word_starts,
    token_confidence,
    word_confidence,
)
from decoders.ctc.greedy import CtcGreedy
from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy
from decoders.transducer.tiny import TinyTransducer, calibrate_blank_bias
from tests.reference import confidence as reference

METHODS = [ConfidenceMethodConfig(name="max_prob", alpha=alpha) for alpha in (1.0, 0.5)] + [
    ConfidenceMethodConfig(name="entropy", entropy_type=kind, alpha=alpha, entropy_norm=norm)
    for kind, alpha, norm in itertools.product(("gibbs", "tsallis", "renyi"), (1.0, 0.33, 0.7), ("lin", "exp"))
]
AGGREGATIONS = ("min", "max", "mean", "prod")


def method_id(method: ConfidenceMethodConfig) -> str:
    if method.name == "max_prob":
        return f"max_prob-{method.alpha}"
    return f"{method.entropy_type}-{method.alpha}-{method.entropy_norm}"


def test_defaults_are_nemo():
    config = ConfidenceConfig()
    assert (config.exclude_blank, config.aggregation, config.tdt_include_duration) == (True, "min", False)
    method = config.method_cfg
    assert (method.name, method.entropy_type, method.alpha, method.entropy_norm) == ("entropy", "tsallis", 0.33, "exp")
    with pytest.raises(ValueError):
        ConfidenceConfig(aggregation="median")
    with pytest.raises(ValueError):
        ConfidenceMethodConfig(alpha=0.0)


@pytest.mark.parametrize("method", METHODS, ids=method_id)
def test_measures_match_reference(method):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 5, 17, generator=generator, dtype=torch.double) * 3
    logits[0, 0] = 0.0  # uniform: confidence 0
    logits[0, 1, 3] = 60.0  # nearly one-hot: confidence 1
    log_probs = torch.log_softmax(logits, dim=-1)
    config = ConfidenceConfig(method_cfg=method)
    batched = token_confidence(log_probs, config)
    assert batched.shape == (6, 5)
    expected = torch.tensor([[reference.measure(row, config) for row in utterance] for utterance in log_probs.tolist()],
                            dtype=torch.double)
    torch.testing.assert_close(batched, expected, atol=1e-9, rtol=1e-9)
    assert abs(float(batched[0, 0])) < 1e-9 and abs(float(batched[0, 1]) - 1) < 1e-6
    # another V in the normalisation (NeMo's TDT durations use the label count)
    torch.testing.assert_close(token_confidence(log_probs, config, 40)[1],
                               torch.tensor([reference.measure(r, config, 40) for r in log_probs[1].tolist()],
                                            dtype=torch.double))


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_word_confidence_matches_reference(aggregation):
    generator = torch.Generator().manual_seed(1)
    batch_size, max_tokens, vocab = 7, 11, 9
    tokens = torch.randint(0, vocab, (batch_size, max_tokens), generator=generator)
    token_lengths = torch.tensor([0, 1, 2, 5, 11, 9, 4])
    values = torch.rand(batch_size, max_tokens, generator=generator, dtype=torch.double)
    piece_differs = torch.rand(vocab, generator=generator) < 0.4
    piece_differs[0] = True  # the lone word marker
    starts, keep = sentencepiece_word_starts(tokens, token_lengths, piece_differs, unk_id=1, space_id=0)
    words, word_lengths = word_confidence(values, starts, token_lengths, aggregation, token_mask=keep)
    for b in range(batch_size):
        n = int(token_lengths[b])
        expected = reference.word_confidence(values[b, :n].tolist(), starts[b, :n].tolist(), keep[b, :n].tolist(),
                                             aggregation)
        assert int(word_lengths[b]) == len(expected)
        torch.testing.assert_close(words[b, : len(expected)], torch.tensor(expected, dtype=torch.double))


@functools.cache
def tiny_model(kind: str) -> TinyTransducer:
    durations = {"rnnt": (), "tdt": (0, 1, 2, 3)}[kind]
    model = TinyTransducer(vocab_size=10, encoder_dim=8, prediction_dim=12, joint_dim=12, durations=durations,
                           seed=3 + len(kind))
    calibrate_blank_bias(model, frames_per_label=2.5)
    return model.double()


CONFIGS = [
    ConfidenceConfig(),
    ConfidenceConfig(exclude_blank=False, aggregation="mean"),
    ConfidenceConfig(exclude_blank=False, aggregation="prod", tdt_include_duration=True,
                     method_cfg=ConfidenceMethodConfig(name="max_prob", alpha=1.0)),
    ConfidenceConfig(exclude_blank=False, aggregation="min",
                     method_cfg=ConfidenceMethodConfig(entropy_type="renyi", alpha=0.5, entropy_norm="lin")),
    ConfidenceConfig(exclude_blank=True, aggregation="max", tdt_include_duration=True,
                     method_cfg=ConfidenceMethodConfig(entropy_type="gibbs", alpha=1.0, entropy_norm="lin")),
]


@pytest.mark.parametrize("host_loop", [True, False], ids=["host-loop", "tensor-loop"])
@pytest.mark.parametrize("kind", ["rnnt", "tdt"])
@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("config", CONFIGS, ids=range(len(CONFIGS)))
def test_transducer_token_confidence(kind, window, config, host_loop):
    """Both loops on the CPU: the host loop CPUs run, and the tensor loop GPUs run."""
    model = tiny_model(kind)
    generator = torch.Generator().manual_seed(5)
    lengths = torch.tensor([0, 1, 7, 23, 30, 16])
    encoder_output = torch.randn(len(lengths), 30, 8, generator=generator, dtype=torch.double)
    max_symbols = 2
    greedy_config = GreedyConfig(max_symbols=max_symbols, window_size=window, host_loop=host_loop)
    plain = LabelLoopingGreedy(model, greedy_config)(encoder_output, lengths)
    hypotheses = LabelLoopingGreedy(model, greedy_config, confidence=config)(encoder_output, lengths)
    assert plain.token_confidence is None
    for with_confidence, without in zip(hypotheses.to_list(), plain.to_list()):
        assert (with_confidence.tokens, with_confidence.frame_indices) == (without.tokens, without.frame_indices)
        assert with_confidence.score == without.score
    for b, result in enumerate(hypotheses.to_list()):
        n = int(lengths[b])
        steps = reference.transducer_steps(model, encoder_output[b, :n], max_symbols)
        expected = reference.transducer_token_confidence(steps, n, model.blank_id, kind == "tdt", config)
        assert result.tokens == [s[1] for s in steps if s[1] != model.blank_id]
        torch.testing.assert_close(torch.tensor(result.confidence, dtype=torch.double),
                                   torch.tensor(expected, dtype=torch.double), atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("config", CONFIGS[:4], ids=range(4))
def test_ctc_token_confidence(config):
    generator = torch.Generator().manual_seed(7)
    blank_id, lengths = 5, torch.tensor([0, 1, 9, 40, 33])
    logits = torch.randn(len(lengths), 40, 6, generator=generator, dtype=torch.double) * 2
    logits[..., blank_id] += 1.5
    log_probs = torch.log_softmax(logits, dim=-1)
    plain = CtcGreedy(blank_id)(log_probs, lengths)
    hypotheses = CtcGreedy(blank_id, confidence=config)(log_probs, lengths)
    torch.testing.assert_close(hypotheses.tokens, plain.tokens, rtol=0, atol=0)
    for b, result in enumerate(hypotheses.to_list()):
        expected = reference.ctc_token_confidence(log_probs[b, : int(lengths[b])], blank_id, config)
        assert len(result.confidence) == len(expected)
        torch.testing.assert_close(torch.tensor(result.confidence, dtype=torch.double),
                                   torch.tensor(expected, dtype=torch.double), atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("kind", ["rnnt", "tdt"])
@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("config", [CONFIGS[0], CONFIGS[4]], ids=["default", "gibbs-duration"])
def test_transducer_token_confidence_past_one_block(kind, window, config):
    """exclude_blank in the tensor loop's eager mode measures the label steps 64 outer iterations at a time:
    rows of more than 64 labels and rows of length 0 and 1 still match the reference."""
    model = tiny_model(kind)
    generator = torch.Generator().manual_seed(11)
    lengths = torch.tensor([1000, 0, 1, 640])
    encoder_output = torch.randn(len(lengths), 1000, 8, generator=generator, dtype=torch.double)
    max_symbols = 2
    greedy_config = GreedyConfig(max_symbols=max_symbols, window_size=window, host_loop=False)
    hypotheses = LabelLoopingGreedy(model, greedy_config, confidence=config)(encoder_output, lengths)
    assert int(hypotheses.token_lengths.max()) > 64
    for b, result in enumerate(hypotheses.to_list()):
        n = int(lengths[b])
        steps = reference.transducer_steps(model, encoder_output[b, :n], max_symbols)
        expected = reference.transducer_token_confidence(steps, n, model.blank_id, kind == "tdt", config)
        assert result.tokens == [s[1] for s in steps if s[1] != model.blank_id]
        torch.testing.assert_close(torch.tensor(result.confidence, dtype=torch.double),
                                   torch.tensor(expected, dtype=torch.double), atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("kind", ["rnnt", "tdt"])
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("exclude_blank", [True, False])
def test_host_loop_confidence_equals_the_tensor_loop(kind, aggregation, exclude_blank):
    """Every window, max_symbols 1 and 3, lengths 0 and 1 included: the CPU's host loop and the tensor loop
    carry the same confidence."""
    model = tiny_model(kind)
    config = ConfidenceConfig(exclude_blank=exclude_blank, aggregation=aggregation, tdt_include_duration=True)
    generator = torch.Generator().manual_seed(len(aggregation))
    lengths = torch.tensor([0, 1, 2, 13, 40, 31, 40])
    encoder_output = torch.randn(len(lengths), 40, 8, generator=generator, dtype=torch.double)
    for window, max_symbols in itertools.product((1, 2, 5, 16), (1, 3)):
        results = [LabelLoopingGreedy(model, GreedyConfig(max_symbols=max_symbols, window_size=window,
                                                          host_loop=host_loop), confidence=config)(
            encoder_output, lengths).to_list() for host_loop in (True, False)]
        for host, tensor in zip(*results):
            assert (host.tokens, host.frame_indices, host.durations) == (tensor.tokens, tensor.frame_indices,
                                                                         tensor.durations)
            assert host.confidence == pytest.approx(tensor.confidence, abs=1e-12)
            assert host.token_scores == pytest.approx(tensor.token_scores, abs=1e-12)
