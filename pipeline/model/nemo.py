"""NeMo checkpoints loaded with NeMo and adapted to the decoders' protocols: the one module that imports NeMo
(lazily, so the rest of the project runs without it).

- `load_asr_model(uri)` takes a local path, `s3://`, `gs://` or any fsspec URI (fetched once per node through
  `pipeline/io/fetch.py`) and restores the checkpoint safely.
- `AsrModel` exposes what decoding needs: `config` (NeMo's model config), `facts`
  (`pipeline/model/nemo_file.py::ModelFacts`, read from the same config the driver reads), `sample_rate`,
  `frame_shift_s` (seconds per encoder frame), `encode(waveforms, lengths)`, `max_symbols` (the checkpoint's
  greedy setting), `transducer` (a `TransducerModel` over NeMo's prediction network and joint, RNN-T or TDT),
  `ctc` (a `CtcModel` over the CTC head of CTC and hybrid models) and `tokenizer`.

Trust: a `.nemo` file holds a pickled torch checkpoint and a config that names classes to build. Loading
restores weights with `torch.load(weights_only=True)` and NeMo 3.0 checks every config `_target_` against its
allow-list, but a checkpoint can still make the loader run code it should not: load models only from
buckets you trust, and pin their sha256.

Dims: B batch, S samples, T encoder frames, D encoder features, H joint hidden, P prediction output,
V labels with blank, N TDT durations.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from decoders.protocols import PredictorState
from decoders.transducer import LstmStep
from pipeline.io import DEFAULT_MODELS_DIR, fetch_file
from pipeline.model.nemo_file import Head, model_facts


class NemoTransducer:
    """`TransducerModel` over a NeMo RNN-T or TDT prediction network (`decoder`) and `joint`.

    The joint returns raw logits (divided by the joint's temperature), as NeMo's joint does on a GPU; on the
    CPU NeMo's adds a log-softmax over all outputs (labels and durations together), which changes no argmax.
    A joint with adapters (checked once, here) goes through NeMo's own `joint_after_projection`.

    At the small batches of greedy decoding a module call costs about as much as the layer's arithmetic, so the
    joint's layers and the prediction projection are called as functions, and on the CPU, without gradients, a
    plain LSTM prediction network runs as `decoders.transducer.lstm_step.LstmStep` on its own weights instead of through
    NeMo's `predict`.
    """

    def __init__(self, decoder: torch.nn.Module, joint: torch.nn.Module, durations: Sequence[int] = ()) -> None:
        self.decoder = decoder
        self.joint = joint
        self.durations = tuple(int(d) for d in durations)
        if joint.num_extra_outputs != len(self.durations):
            raise ValueError(f"the joint has {joint.num_extra_outputs} extra outputs but the config names "
                             f"{len(self.durations)} TDT durations")
        self.vocab_size = joint.num_classes_with_blank - 1 - joint.num_extra_outputs
        self.blank_id = self.vocab_size
        if not getattr(decoder, "blank_as_pad", True):
            # the blank (start of sequence) must embed to zeros; NeMo's greedy_batch itself falls back to a
            # masked frame-looping search for such models
            raise ValueError("prediction networks with blank_as_pad=False are not supported")
        is_adapted = getattr(joint, "is_adapter_available", None)
        self._plain_joint = not (is_adapted is not None and is_adapted())
        # an LSTM state is (h, c) of [layers, B, hidden]; a stateless decoder keeps [B, context] tensors
        self._state_batch_dim = 1 if hasattr(decoder, "pred_rnn_layers") else 0
        self._lstm_step = _plain_lstm_step(decoder)  # None unless the prediction network is a plain LSTM
        self._joint_layers = _joint_layers(joint) if self._plain_joint else None

    def project_encoder(self, encoder_output: Tensor) -> Tensor:
        return self.joint.project_encoder(encoder_output)

    def initial_state(self, batch_size: int, device, dtype) -> PredictorState:
        like = torch.empty(batch_size, 1, device=device, dtype=dtype)
        return tuple(self.decoder.initialize_state(like))

    def predict(self, labels: Tensor, state: PredictorState) -> tuple[Tensor, PredictorState]:
        if (self._lstm_step is not None and state is not None and labels.device.type == "cpu"
                and not torch.is_grad_enabled() and not self.decoder.training):
            return self._lstm_step(labels, state)
        output, next_state, *_ = self.decoder.predict(labels.unsqueeze(1), list(state) if state is not None
                                                      else None, add_sos=False, batch_size=labels.shape[0])
        return output[:, 0], tuple(next_state)  # [B, P]

    def project_prediction(self, prediction: Tensor) -> Tensor:
        projection = self.joint.pred
        if type(projection) is torch.nn.Linear:  # NeMo's project_prednet, without two module calls
            return torch.nn.functional.linear(prediction, projection.weight, projection.bias)
        return self.joint.project_prednet(prediction)

    def joint_after_projection(self, encoder_projected: Tensor, prediction_projected: Tensor) -> Tensor:
        if self._plain_joint:
            # NeMo's joint_after_projection minus its CPU-only log-softmax (the decoder normalizes the labels it
            # scores; argmaxes are unchanged) and minus its [B, T, U] reshaping: any broadcastable shapes work
            hidden = encoder_projected + prediction_projected
            if self._joint_layers is not None and not self.joint.training:
                # the same functions as joint_net's modules (dropout is off in eval), called directly: a
                # module call costs about as much as the layer itself at batch size 1 on a CPU
                activation, output = self._joint_layers
                logits = torch.nn.functional.linear(activation(hidden), output.weight, output.bias)
            else:
                logits = self.joint.joint_net(hidden)
            return logits / self.joint.temperature if self.joint.temperature != 1.0 else logits
        # with adapters, NeMo's own method: f [B, T, H], g [B, U, H] -> [B, T, U, V (+N)], each row as T = U = 1
        if encoder_projected.shape != prediction_projected.shape:
            encoder_projected, prediction_projected = torch.broadcast_tensors(encoder_projected,
                                                                              prediction_projected)
        leading, hidden = encoder_projected.shape[:-1], encoder_projected.shape[-1]
        logits = self.joint.joint_after_projection(encoder_projected.reshape(-1, 1, hidden),
                                                   prediction_projected.reshape(-1, 1, hidden))  # [N, 1, 1, V (+N)]
        return logits.reshape(*leading, logits.shape[-1])

    def replace_states_(self, destination: PredictorState, source: PredictorState, mask: Tensor) -> None:
        if any(dst.dtype != src.dtype for dst, src in zip(destination, source)):
            # NeMo's method casts (an LSTM under autocast returns another dtype than its state's)
            self.decoder.batch_replace_states_mask(src_states=source, dst_states=destination, mask=mask)
            return
        for dst, src in zip(destination, source):
            shape = [1] * dst.dim()
            shape[self._state_batch_dim] = -1
            torch.where(mask.view(shape), src, dst, out=dst)

    def select_states(self, state: PredictorState, indices: Tensor) -> PredictorState:
        return tuple(s.index_select(self._state_batch_dim, indices) for s in state)


_ACTIVATIONS = {torch.nn.ReLU: torch.relu_, torch.nn.Tanh: torch.tanh_, torch.nn.Sigmoid: torch.sigmoid_}


def _joint_layers(joint: torch.nn.Module) -> tuple[Callable[[Tensor], Tensor], torch.nn.Linear] | None:
    """NeMo's `joint_net` (activation, dropout if any, linear) as (in-place activation, the linear layer), or
    None for any other layout. In place, as NeMo's ReLU(inplace=True): the sum it acts on is a fresh tensor."""
    layers = list(getattr(joint, "joint_net", ()))
    if len(layers) == 3 and type(layers[1]) is torch.nn.Dropout:
        layers = [layers[0], layers[2]]
    if len(layers) != 2 or type(layers[0]) not in _ACTIVATIONS or type(layers[1]) is not torch.nn.Linear:
        return None
    return _ACTIVATIONS[type(layers[0])], layers[1]


def _plain_lstm_step(decoder: torch.nn.Module) -> LstmStep | None:
    """A direct step for NeMo's `RNNTDecoder` when its network is an embedding and a plain `nn.LSTM` (NeMo's
    `LSTMDropout`: no layer norm, projection or adapters), else None (NeMo's `predict` runs).

    NeMo's step is one oneDNN `nn.LSTM` call: 115 us at batch 1 where `LstmStep` takes 15, and 167 against 113
    at batch 32 (hidden 160, one CPU core). The two differ by rounding only (about 1e-7); tests check that
    greedy tokens stay NeMo's.
    """
    prediction = getattr(decoder, "prediction", None)
    if not isinstance(prediction, torch.nn.ModuleDict) or set(prediction.keys()) != {"embed", "dec_rnn"}:
        return None
    rnn = prediction["dec_rnn"]
    has_adapters = decoder.is_adapter_available() if hasattr(decoder, "is_adapter_available") else False
    if type(rnn).__name__ != "LSTMDropout" or has_adapters:
        return None
    return LstmStep.of(prediction["embed"], getattr(rnn, "lstm", None))


class NemoCtcHead:
    """`CtcModel` over a NeMo CTC head (`ConvASRDecoder`), which takes [B, D, T] and returns log-softmax."""

    def __init__(self, head: torch.nn.Module) -> None:
        self.head = head
        self.vocab_size = head.num_classes_with_blank - 1
        self.blank_id = self.vocab_size

    def log_probs(self, encoder_output: Tensor) -> Tensor:
        """encoder_output [B, T, D] -> log-probabilities [B, T, V]."""
        return self.head(encoder_output=encoder_output.transpose(1, 2))


class NemoTokenizer:
    """Token ids -> SentencePiece pieces -> text, as NeMo's decoding turns them into words.

    `punctuation` is the set of punctuation marks NeMo's decoding found in the vocabulary (it attaches them to
    the word before and adjusts their timestamps).
    """

    def __init__(self, tokenizer: Any, punctuation: Sequence[str] | None = None) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = int(tokenizer.vocab_size)
        self.punctuation = frozenset(punctuation or ())

    def ids_to_pieces(self, ids: Sequence[int]) -> list[str]:
        return list(self.tokenizer.ids_to_tokens([int(i) for i in ids]))

    def pieces_to_text(self, pieces: Sequence[str]) -> str:
        return self.tokenizer.tokens_to_text(list(pieces))

    def ids_to_text(self, ids: Sequence[int]) -> str:
        return self.tokenizer.ids_to_text([int(i) for i in ids])



class AsrModel:
    """A NeMo ASR model as decoders see it: encoder, transducer and/or CTC head, tokenizer, frame timing."""

    def __init__(self, nemo_model: Any) -> None:
        nemo_model.eval()
        self.nemo_model = nemo_model
        self.config = nemo_model.cfg  # the model config (`model_config.yaml`), e.g. for its memory model
        self.facts = model_facts(nemo_model.cfg)
        self.kind = self.facts.kind
        preprocessor = nemo_model.preprocessor
        featurizer = getattr(preprocessor, "featurizer", None)
        if featurizer is not None:
            # as NeMo's transcribe(): no dither, no padding of the features to a multiple of frames
            if hasattr(featurizer, "dither"):
                featurizer.dither = 0.0
            if hasattr(featurizer, "pad_to"):
                featurizer.pad_to = 0
        self.sample_rate = self.facts.sample_rate
        self.frame_shift_s = float(nemo_model.cfg.preprocessor.window_stride) * int(
            nemo_model.encoder.subsampling_factor)
        self.transducer = (NemoTransducer(nemo_model.decoder, nemo_model.joint, self.facts.durations)
                           if hasattr(nemo_model, "joint") else None)
        ctc_head = getattr(nemo_model, "ctc_decoder", None) if self.transducer is not None else nemo_model.decoder
        self.ctc = NemoCtcHead(ctc_head) if ctc_head is not None else None
        decoding = getattr(nemo_model, "decoding", None) or getattr(nemo_model, "ctc_decoding", None)
        self.tokenizer = NemoTokenizer(nemo_model.tokenizer, getattr(decoding, "supported_punctuation", None))
        self.max_symbols = self.facts.max_symbols  # NeMo's per-frame limit for this checkpoint
        self.heads: tuple[Head, ...] = tuple(h for h, m in (("transducer", self.transducer), ("ctc", self.ctc))
                                             if m is not None)

    @property
    def device(self) -> torch.device:
        return next(self.nemo_model.parameters()).device

    def use_local_attention(self, context_frames: int) -> None:
        """Make the encoder attend `context_frames` encoder frames each side (NeMo's `rel_pos_local_attn`), so
        its memory grows with the input's length instead of its square; raises `ValueError` for an encoder
        without it (only Conformer-style encoders with relative positions have it)."""
        encoder = self.nemo_model.encoder
        attention = getattr(encoder, "self_attention_model", None)
        if not hasattr(encoder, "change_attention_model") or attention not in ("rel_pos", "rel_pos_local_attn"):
            raise ValueError(f"local attention needs a Conformer encoder with relative positions; this model's "
                             f"encoder is {type(encoder).__name__} with {attention or 'no'} self-attention")
        with _nemo_quiet():
            encoder.change_attention_model("rel_pos_local_attn", [context_frames, context_frames],
                                           update_config=False, device=self.device)
        self.nemo_model.eval()

    @torch.no_grad()
    def encode(self, waveforms: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """waveforms [B, S] float at `sample_rate`, lengths [B] samples -> encoder_output [B, T, D], [B] frames."""
        if waveforms.dim() != 2:
            raise ValueError(f"waveforms must be [B, S], got {tuple(waveforms.shape)}")
        if lengths.dim() != 1 or lengths.shape[0] != waveforms.shape[0]:
            raise ValueError(f"lengths must be [B] with B={waveforms.shape[0]}, got {tuple(lengths.shape)}")
        self.nemo_model.eval()  # NeMo's transcribe() leaves the encoder in training mode (dropout) when it ends
        device = self.device
        features, feature_lengths = self.nemo_model.preprocessor(
            input_signal=waveforms.to(device=device, dtype=torch.float32), length=lengths.to(device))
        encoded, encoded_lengths = self.nemo_model.encoder(audio_signal=features, length=feature_lengths)
        return encoded.transpose(1, 2), encoded_lengths.long()  # [B, D, T] -> [B, T, D]



def _safe_connector():
    """NeMo's SaveRestoreConnector with weights loaded by `torch.load(weights_only=True)`, whatever the env."""
    from nemo.core.connectors.save_restore_connector import SaveRestoreConnector

    class WeightsOnlyConnector(SaveRestoreConnector):
        @staticmethod
        def _load_state_dict_from_disk(model_weights, map_location="cpu"):
            return torch.load(model_weights, map_location=map_location, weights_only=True)

    return WeightsOnlyConnector()


@contextlib.contextmanager
def _nemo_quiet() -> Iterator[None]:
    """NeMo's info and warning lines while a checkpoint is restored (loss setup, data-loader hints, CUDA graphs
    unavailable on the CPU, OneLogger) say nothing to someone transcribing; each actor would print them all.
    Errors still show, and the levels are restored afterwards."""
    one_logger = logging.getLogger("nv_one_logger")  # a standard logger, set before NeMo imports it
    one_logger_level = one_logger.level
    one_logger.setLevel(logging.ERROR)
    from nemo.utils import logging as nemo_logging

    nemo_level = nemo_logging.getEffectiveLevel()
    nemo_logging.setLevel(logging.ERROR)
    try:
        yield
    finally:
        nemo_logging.setLevel(nemo_level)
        one_logger.setLevel(one_logger_level)


def load_asr_model(uri: str, sha256: str | None = None, cache_dir: Path | str = DEFAULT_MODELS_DIR,
                   device: str | torch.device = "cpu") -> AsrModel:
    """Fetch (once per node, into the fetch store `cache_dir`) and load a NeMo RNN-T, TDT, CTC or hybrid `.nemo`.
    Load only trusted files."""
    path = fetch_file(uri, sha256=sha256, cache_dir=cache_dir)
    with _nemo_quiet():
        from nemo.collections.asr.models import ASRModel

        nemo_model = ASRModel.restore_from(str(path), map_location=torch.device(device),
                                           save_restore_connector=_safe_connector())
    _return_freed_memory()
    return AsrModel(nemo_model)


def _return_freed_memory() -> None:
    """Give back to the system the heap NeMo's restore freed: it builds the model with random weights, then loads the
    checkpoint's, and glibc keeps the first weights' pages (an ASR actor of the 2.48 GB 0.6b shape held 5.85 GB
    after the restore, 3.37 GB after this). Nothing where the C library has no `malloc_trim`."""
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
