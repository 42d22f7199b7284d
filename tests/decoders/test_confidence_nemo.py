"""Our per-token and per-word confidence equal NeMo 3.0's for greedy decoding, on the same encoder output of
random NeMo models (tests/conftest.py::nemo_assets): RNN-T, TDT and CTC heads."""

from __future__ import annotations

import functools

import pytest
import soundfile
import torch

from decoders.confidence import ConfidenceConfig, ConfidenceMethodConfig, sentencepiece_word_starts, word_confidence
from decoders.ctc.greedy import CtcGreedy
from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy

pytestmark = pytest.mark.nemo

CONFIGS = [
    ConfidenceConfig(),  # NeMo's default: tsallis 0.33 exp, exclude_blank, min
    ConfidenceConfig(exclude_blank=False, aggregation="mean",
                     method_cfg=ConfidenceMethodConfig(entropy_type="gibbs", alpha=0.5, entropy_norm="lin")),
    ConfidenceConfig(exclude_blank=False, aggregation="prod", tdt_include_duration=True,
                     method_cfg=ConfidenceMethodConfig(name="max_prob", alpha=1.0)),
    ConfidenceConfig(exclude_blank=True, aggregation="mean", tdt_include_duration=True,
                     method_cfg=ConfidenceMethodConfig(entropy_type="renyi", alpha=0.25)),
]
CASES = [("rnnt", "transducer"), ("tdt_ctc", "transducer"), ("tdt_ctc", "ctc"), ("ctc", "ctc")]


def nemo_confidence_cfg(config: ConfidenceConfig) -> dict:
    method = config.method_cfg
    return dict(preserve_frame_confidence=True, preserve_token_confidence=True, preserve_word_confidence=True,
                exclude_blank=config.exclude_blank, aggregation=config.aggregation,
                tdt_include_duration=config.tdt_include_duration,
                method_cfg=dict(name=method.name, entropy_type=method.entropy_type, alpha=method.alpha,
                                entropy_norm=method.entropy_norm))


@functools.cache
def load(checkpoint: str):
    from nemo.collections.asr.models import ASRModel

    from pipeline.model.nemo import AsrModel

    return AsrModel(ASRModel.restore_from(checkpoint, map_location="cpu"))


def nemo_hypotheses(asr, head: str, config: ConfidenceConfig, encoder_output, encoder_lengths):
    from omegaconf import open_dict

    model = asr.nemo_model
    hybrid = hasattr(model, "ctc_decoder")
    decoding = model.cfg.aux_ctc.decoding if hybrid and head == "ctc" else model.cfg.decoding
    with open_dict(decoding):
        decoding.strategy = "greedy_batch"
        decoding.confidence_cfg = nemo_confidence_cfg(config)
    kwargs = dict(decoder_type="rnnt" if head == "transducer" else "ctc") if hybrid else {}
    model.change_decoding_strategy(decoding, verbose=False, **kwargs)
    with torch.no_grad():
        if head == "transducer":
            return model.decoding.rnnt_decoder_predictions_tensor(
                encoder_output=encoder_output.transpose(1, 2), encoded_lengths=encoder_lengths, return_hypotheses=True)
        ctc_decoder = model.ctc_decoder if hybrid else model.decoder
        decoding_object = model.ctc_decoding if hybrid else model.decoding
        log_probs = ctc_decoder(encoder_output=encoder_output.transpose(1, 2))
        return decoding_object.ctc_decoder_predictions_tensor(log_probs, encoder_lengths, return_hypotheses=True)


def word_tables(asr, head: str):
    model = asr.nemo_model
    decoding = model.ctc_decoding if hasattr(model, "ctc_decoder") and head == "ctc" else model.decoding
    vocab = model.tokenizer.vocab_size
    pieces = [decoding.decode_ids_to_tokens([v])[0] for v in range(vocab)]
    differs = torch.tensor([pieces[v] != decoding.decode_ids_to_str([v]) for v in range(vocab)] + [False])
    unk = pieces.index("<unk>") if "<unk>" in pieces else None
    space = pieces.index("▁") if "▁" in pieces else None
    return differs, unk, space


@pytest.mark.parametrize("kind,head", CASES, ids=[f"{k}-{h}" for k, h in CASES])
def test_confidence_equals_nemo(nemo_assets, kind, head):
    asr = load(str(nemo_assets["checkpoints"][kind]))
    if head == "transducer" and asr.transducer is None or head == "ctc" and asr.ctc is None:
        pytest.skip(f"{kind} has no {head} head")
    differs, unk, space = word_tables(asr, head)
    checked = 0
    for path in nemo_assets["files"][:6]:
        waveform = torch.from_numpy(soundfile.read(path, dtype="float32")[0]).unsqueeze(0)
        encoder_output, encoder_lengths = asr.encode(waveform, torch.tensor([waveform.shape[1]]))
        for config in CONFIGS:
            if asr.transducer is not None and asr.transducer.durations and head == "transducer" \
                    and not config.exclude_blank:
                continue  # NeMo 3.0's TDT greedy_batch keeps no frame_confidence here: compute_confidence fails
            expected = nemo_hypotheses(asr, head, config, encoder_output, encoder_lengths)[0]
            if head == "transducer":
                decoder = LabelLoopingGreedy(asr.transducer, GreedyConfig(max_symbols=asr.max_symbols,
                                                                           use_cuda_graphs=False), confidence=config)
                ours = decoder(encoder_output, encoder_lengths)
            else:
                log_probs = asr.ctc.log_probs(encoder_output)
                ours = CtcGreedy(log_probs.shape[-1] - 1, confidence=config)(log_probs, encoder_lengths)
            hypothesis = ours.to_list()[0]
            expected_tokens = [int(t) for t in expected.y_sequence]
            if head == "ctc":  # NeMo keeps the frame labels: collapse them
                blank = log_probs.shape[-1] - 1
                expected_tokens = [t for i, t in enumerate(expected_tokens)
                                   if t != blank and (i == 0 or expected_tokens[i - 1] != t)]
            assert hypothesis.tokens == expected_tokens
            torch.testing.assert_close(torch.tensor(hypothesis.confidence, dtype=torch.double),
                                       torch.tensor(expected.token_confidence, dtype=torch.double),
                                       atol=1e-5, rtol=0)
            starts, keep = sentencepiece_word_starts(ours.tokens, ours.token_lengths, differs, unk, space)
            words, word_lengths = word_confidence(ours.token_confidence, starts, ours.token_lengths,
                                                  config.aggregation, token_mask=keep)
            assert int(word_lengths[0]) == len(expected.word_confidence)
            torch.testing.assert_close(words[0, : int(word_lengths[0])].double(),
                                       torch.tensor(expected.word_confidence, dtype=torch.double), atol=1e-5, rtol=0)
            checked += len(hypothesis.tokens)
    assert checked > 0
