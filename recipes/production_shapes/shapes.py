"""The architectures loopscribe's users run, built here with random weights and a calibrated emission rate.

Nothing downloads: NeMo builds each model from its config, with a SentencePiece tokenizer trained here on text
made here (`recipes/production_shapes/text.py`), and `calibrate_emission` makes the random model emit about one
label per three encoder frames, as a trained model does on speech, so that its decoding costs what a real
model's does and its tokens and timestamps are deterministic.

| shape | model | layers | pieces |
| --- | --- | --- | --- |
| `parakeet-tdt-0.6b` | hybrid TDT+CTC (`EncDecHybridRNNTCTCBPEModel`), durations 0-4 | 24 | 1,024, cased, punctuated |
| `parakeet-tdt-0.6b-v3` | TDT (`EncDecRNNTBPEModel`), durations 0-4 | 24 | 8,192, multilingual, cased |
| `parakeet-rnnt-1.1b` | RNN-T (`EncDecRNNTBPEModel`), 80 mel features | 42 | 1,024, lower case |
| `parakeet-ctc-1.1b` | CTC (`EncDecCTCModelBPE`), 80 mel features | 42 | 1,024, lower case |

All are FastConformers with d_model 1024, 8 heads, feed-forward expansion 4, 8x depthwise-striding subsampling
(256 channels), and (transducers) a 2-layer LSTM prediction network and a joint of width 640. `Shape.at_depth(n)`
keeps every width, the vocabulary and the durations and changes only the number of encoder layers: what the
regular test suite builds (full depth takes minutes and gigabytes here; see docs/production_models.md).

`tests/support/random_nemo.py` builds its small models with the same config writer and calibration.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from recipes.production_shapes.text import REPOSITORY, TEXTS

SAMPLE_RATE = 16000
Kind = Literal["rnnt", "tdt", "tdt_ctc", "ctc"]
TextStyle = Literal["cased", "lower", "multilingual"]


@dataclass(frozen=True)
class Shape:
    """A FastConformer model's architecture: what NeMo's config says, without the training sections."""

    name: str
    kind: Kind  # rnnt, tdt (transducer only), tdt_ctc (hybrid TDT + CTC), ctc
    vocab_size: int  # SentencePiece pieces (the blank comes after them)
    text: TextStyle  # what the tokenizer is trained on
    n_layers: int = 24
    d_model: int = 1024
    n_heads: int = 8
    ff_expansion_factor: int = 4
    features: int = 128  # mel bands
    subsampling_conv_channels: int = 256
    pred_hidden: int = 640
    joint_hidden: int = 640
    pred_rnn_layers: int = 2
    durations: tuple[int, ...] = (0, 1, 2, 3, 4)  # TDT only
    conv_kernel_size: int = 9

    def at_depth(self, n_layers: int | None) -> Shape:
        """The same shape with `n_layers` encoder layers (None: as it is); every width stays."""
        if n_layers is None or n_layers == self.n_layers:
            return self
        if n_layers < 1:
            raise ValueError(f"n_layers must be at least 1, got {n_layers}")
        return dataclasses.replace(self, name=f"{self.name}-{n_layers}layers", n_layers=n_layers)

    @property
    def is_tdt(self) -> bool:
        return self.kind in ("tdt", "tdt_ctc")


SHAPES = {
    shape.name: shape for shape in (
        Shape("parakeet-tdt-0.6b", "tdt_ctc", 1024, "cased"),
        Shape("parakeet-tdt-0.6b-v3", "tdt", 8192, "multilingual"),
        Shape("parakeet-rnnt-1.1b", "rnnt", 1024, "lower", n_layers=42, features=80),
        Shape("parakeet-ctc-1.1b", "ctc", 1024, "lower", n_layers=42, features=80),
    )
}


def shape_named(name: str, n_layers: int | None = None) -> Shape:
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}; the shapes are {', '.join(SHAPES)}")
    return SHAPES[name].at_depth(n_layers)


# the tokenizer: how many lines of text each vocabulary size is trained on
TEXT_LINES = {1024: 20_000, 8192: 120_000}


def train_tokenizer(out_dir: Path, vocab_size: int, text: TextStyle | Sequence[str], seed: int = 0) -> Path:
    """A SentencePiece BPE tokenizer of exactly `vocab_size` pieces in the folder layout NeMo expects
    (tokenizer.model, tokenizer.vocab, vocab.txt), trained without lower-casing on `text`: a style of
    `recipes/production_shapes/text.py` or the lines themselves. Returns `out_dir`.

    SentencePiece (as NeMo calls it, `hard_vocab_limit=false`) stops short of `vocab_size` when the text is too
    small; that is an error here, since the vocabulary's size is what a shape is about.
    """
    from nemo.collections.common.tokenizers.sentencepiece_tokenizer import create_spt_model

    if isinstance(text, str):
        lines = TEXTS[text](TEXT_LINES.get(vocab_size, max(2_000, 15 * vocab_size)), seed)
    else:
        lines = list(text)
    out_dir.mkdir(parents=True, exist_ok=True)
    text_file = out_dir / "text.txt"
    text_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    model_path, _ = create_spt_model(str(text_file), vocab_size, sample_size=-1, do_lower_case=False,
                                     tokenizer_type="bpe", output_dir=str(out_dir))
    import sentencepiece

    pieces = sentencepiece.SentencePieceProcessor(model_file=model_path).get_piece_size()
    if pieces != vocab_size:
        raise ValueError(f"{model_path}: the text gave {pieces} pieces, not {vocab_size}: give it more text")
    return out_dir


def tokenizer_properties(tokenizer_dir: Path) -> dict[str, object]:
    """What a tokenizer holds that the jobs care about: its size, whether it has capitals, and its
    punctuation marks (as NeMo's `extract_punctuation_from_vocab` finds them)."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(tokenizer_dir / "tokenizer.model"))
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    ordinary = [p for p in pieces if not (p.startswith(("▁", "<", "[")) or not p.strip())]
    return {
        "vocab_size": len(pieces),
        "cased": any(c.isupper() for p in pieces for c in p),
        "punctuation": "".join(sorted({c for p in ordinary for c in p if unicodedata.category(c).startswith("P")})),
    }


def fastconformer_config(shape: Shape, tokenizer_dir: Path, dropout: float = 0.1) -> dict:
    """A NeMo model config (the `model:` section) for `shape`, after NeMo's FastConformer example configs
    (`examples/asr/conf/fastconformer/`, `hybrid_transducer_ctc/fastconformer_hybrid_tdt_ctc_bpe.yaml`), without
    data sets, optimizer or training-only settings."""
    config: dict = {
        "sample_rate": SAMPLE_RATE,
        "tokenizer": {"dir": str(tokenizer_dir), "type": "bpe"},
        # no data sets, but transcribe() reads validation_ds.use_start_end_token
        "validation_ds": {"manifest_filepath": None, "sample_rate": SAMPLE_RATE, "batch_size": 4, "shuffle": False,
                          "use_start_end_token": False},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": SAMPLE_RATE, "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01,
            "window": "hann", "features": shape.features, "n_fft": 512, "frame_splicing": 1, "dither": 0.00001,
            "pad_to": 0,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": shape.features, "feat_out": -1, "n_layers": shape.n_layers, "d_model": shape.d_model,
            "subsampling": "dw_striding", "subsampling_factor": 8,
            "subsampling_conv_channels": shape.subsampling_conv_channels, "causal_downsampling": False,
            "ff_expansion_factor": shape.ff_expansion_factor, "self_attention_model": "rel_pos",
            "n_heads": shape.n_heads, "att_context_size": [-1, -1], "xscaling": True, "untie_biases": True,
            "pos_emb_max_len": 5000, "conv_kernel_size": shape.conv_kernel_size, "conv_norm_type": "batch_norm",
            "dropout": dropout, "dropout_pre_encoder": dropout, "dropout_emb": 0.0, "dropout_att": dropout,
        },
    }
    ctc_decoder = {"_target_": "nemo.collections.asr.modules.ConvASRDecoder",
                   "feat_in": shape.d_model if shape.kind == "ctc" else None, "num_classes": -1, "vocabulary": []}
    if shape.kind == "ctc":
        config["decoder"] = ctc_decoder
        config["decoding"] = {"strategy": "greedy_batch"}
        return config
    config["model_defaults"] = {"enc_hidden": shape.d_model, "pred_hidden": shape.pred_hidden,
                                "joint_hidden": shape.joint_hidden}
    config["decoder"] = {
        "_target_": "nemo.collections.asr.modules.RNNTDecoder", "normalization_mode": None,
        "random_state_sampling": False, "blank_as_pad": True,
        "prednet": {"pred_hidden": shape.pred_hidden, "pred_rnn_layers": shape.pred_rnn_layers, "t_max": None,
                    "dropout": dropout},
    }
    config["joint"] = {
        "_target_": "nemo.collections.asr.modules.RNNTJoint", "log_softmax": None, "preserve_memory": False,
        "fuse_loss_wer": False,
        "jointnet": {"joint_hidden": shape.joint_hidden, "activation": "relu", "dropout": dropout},
    }
    config["decoding"] = {"strategy": "greedy_batch", "greedy": {"max_symbols": 10}}
    config["loss"] = {"loss_name": "default"}
    if shape.is_tdt:
        durations = list(shape.durations)
        config["model_defaults"].update(tdt_durations=durations, num_tdt_durations=len(durations))
        config["joint"]["num_extra_outputs"] = len(durations)
        config["decoding"].update(model_type="tdt", durations=durations)
        config["loss"] = {"loss_name": "tdt", "tdt_kwargs": {"durations": durations, "sigma": 0.02, "omega": 0.1}}
    if shape.kind == "tdt_ctc":
        config["aux_ctc"] = {"ctc_loss_weight": 0.3, "use_cer": False, "ctc_reduction": "mean_batch",
                             "decoder": ctc_decoder, "decoding": {"strategy": "greedy_batch"}}
    return config


def build_random_model(shape: Shape, tokenizer_dir: Path, seed: int = 0):
    """`shape` with random weights (seeded), in eval mode on the CPU."""
    from lightning.pytorch import seed_everything
    from nemo.collections.asr.models import EncDecCTCModelBPE, EncDecHybridRNNTCTCBPEModel, EncDecRNNTBPEModel
    from omegaconf import OmegaConf

    seed_everything(seed, verbose=False)
    config = OmegaConf.create(fastconformer_config(shape, tokenizer_dir))
    model_class = {"rnnt": EncDecRNNTBPEModel, "tdt": EncDecRNNTBPEModel, "tdt_ctc": EncDecHybridRNNTCTCBPEModel,
                   "ctc": EncDecCTCModelBPE}[shape.kind]
    return model_class(cfg=config).eval()


def parameter_count(nemo_model) -> int:
    return sum(p.numel() for p in nemo_model.parameters())


def encoder_layer_parameters(nemo_model) -> int:
    """Parameters of one encoder layer: the full-depth count of a reduced-depth model is
    parameter_count + (full layers - layers) x this."""
    return sum(p.numel() for p in nemo_model.encoder.layers[0].parameters())


def _head_output(nemo_model, head: Literal["transducer", "ctc"]) -> tuple[torch.nn.Module, int]:
    """The layer whose bias holds a head's label logits, and the blank's index among them."""
    if head == "transducer":
        return nemo_model.joint.joint_net[-1], nemo_model.joint.num_classes_with_blank - 1 - \
            nemo_model.joint.num_extra_outputs
    ctc = nemo_model.ctc_decoder if hasattr(nemo_model, "ctc_decoder") else nemo_model.decoder
    return ctc.decoder_layers[0], ctc.num_classes_with_blank - 1


def set_label_bias(nemo_model, head: Literal["transducer", "ctc"], label_ids: Sequence[int], bias: float) -> None:
    """Add `bias` to the logits' bias of `label_ids` in the joint (transducer) or the CTC head, relative to the
    bias as built (the first call remembers it)."""
    layer, _ = _head_output(nemo_model, head)
    with torch.no_grad():
        if not hasattr(layer, "_base_bias"):
            layer._base_bias = layer.bias.detach().clone()
        index = torch.as_tensor(list(label_ids), dtype=torch.long)
        layer.bias[index] = layer._base_bias[index] + bias


def set_blank_bias(nemo_model, head: Literal["transducer", "ctc"], bias: float) -> None:
    """Add `bias` to the blank logit's bias of the joint (transducer) or the CTC head, relative to as built."""
    set_label_bias(nemo_model, head, [_head_output(nemo_model, head)[1]], bias)


def punctuation_ids(model) -> list[int]:
    """The token ids of an `AsrModel` whose text is one of the punctuation marks NeMo's decoding knows."""
    tokenizer = model.tokenizer
    pieces = tokenizer.ids_to_pieces(range(tokenizer.vocab_size))
    return [i for i, piece in enumerate(pieces) if tokenizer.pieces_to_text([piece]) in tokenizer.punctuation]


def calibrate_emission(nemo_model, waveforms: Sequence[np.ndarray], frames_per_label: float = 3.0,
                       iterations: int = 8, encoder_scale: float = 1.0, prediction_scale: float = 1.0,
                       punctuation_share: float | None = None,
                       frame_variation: float | None = None,
                       prediction_ratio: float | None = None, max_symbols: int = 3,
                       center_durations: bool = False) -> dict[str, float]:
    """Make a random model emit about one label per `frames_per_label` under our greedy decoding, and with
    `punctuation_share`, about that share of its labels punctuation marks (where the vocabulary has them).

    A random transducer's emissions feed themselves (a label changes the prediction network's output, which
    makes the next label likely), and its encoder output is nearly the same on every frame, so it runs
    `max_symbols` labels on every frame or on none. Centering the joint's encoder projection on the mean encoder
    output, scaling it up by `encoder_scale` and the prediction projection down by `prediction_scale` lets the
    frames lead, as in a trained model. A random CTC head has the same flat argmax (one long run of one label):
    its logits are centered the same way. The deeper a random encoder, the more alike its frames (a frame's
    distance from the mean frame is 18% of its norm after 1 or 2 FastConformer layers of width 1024, 7% after 24),
    and a model whose frames are alike emits one label throughout: `frame_variation` scales both heads' encoder
    projections as if that share were `frame_variation`. A wide random joint hardly hears its prediction network
    (its projection varies a tenth as much as the encoder's at width 1024 and 640), so that a transducer repeats
    one label over similar frames: `prediction_ratio` scales the prediction projection to vary that many times as
    much as the encoder's (a TDT model's: an RNN-T's labels would feed themselves on one frame).
    `center_durations` centers a TDT joint's duration logits on the calibration frames, so that its durations
    spread over all of them (a random joint gives the same one nearly everywhere). With `punctuation_share`, the
    punctuation marks' logits are raised until a mark is the best label but the blank on that share of the frames
    (a random model picks them as rarely as any of a thousand labels, where a punctuated transcript has about one
    in ten). Then each head's blank bias is bisected, with at most 3 labels a frame, and a TDT head's again
    near it with at most `max_symbols`. Returns each head's blank bias, and its punctuation bias as
    "<head>_punctuation".
    """
    from decoders.transducer.greedy import GreedyConfig
    from pipeline.decoding.recognize import GreedyRecognizer, pad_waveforms
    from pipeline.model.nemo import AsrModel

    model = AsrModel(nemo_model)
    audio, lengths = pad_waveforms(waveforms)
    encoder_output, encoder_lengths = model.encode(audio, lengths)
    with torch.no_grad():
        inside = torch.arange(encoder_output.shape[1]) < encoder_lengths.unsqueeze(1)  # [B, T]
        mean = encoder_output[inside].mean(dim=0)  # [D]
        if frame_variation is not None:
            frames = encoder_output[inside]  # [N, D]
            spread = frame_variation / float(((frames - mean).norm(dim=1) / frames.norm(dim=1)).mean())
            if model.transducer is not None:
                model.transducer.joint.enc.weight.mul_(spread)
            if model.ctc is not None:
                model.ctc.head.decoder_layers[0].weight.mul_(spread)
        if model.transducer is not None:
            joint, transducer = model.transducer.joint, model.transducer
            labels = torch.arange(transducer.vocab_size + 1)  # one step after each label (blank = start)
            state = transducer.initial_state(len(labels), labels.device, encoder_output.dtype)
            prediction, _ = transducer.predict(labels, state)  # [V, P]
            if prediction_ratio is not None and transducer.durations:
                spread_encoder = (encoder_output[inside] - mean) @ joint.enc.weight.T  # [N, H]
                spread_prediction = (prediction - prediction.mean(dim=0)) @ joint.pred.weight.T  # [V, H]
                joint.pred.weight.mul_(prediction_ratio * float(spread_encoder.std() / spread_prediction.std()))
            joint.enc.bias -= joint.enc.weight @ mean
            joint.pred.bias -= joint.pred.weight @ prediction.mean(dim=0)
            joint.enc.weight.mul_(encoder_scale)
            joint.pred.weight.mul_(prediction_scale)
        if model.ctc is not None:
            layer = model.ctc.head.decoder_layers[0]  # Conv1d(D, V, 1)
            layer.bias -= layer.weight[:, :, 0] @ mean
    marks = torch.tensor(punctuation_ids(model) if punctuation_share else [], dtype=torch.long)
    biases = {}
    for head in model.heads:
        # at most 3 labels per frame while bisecting from afar: far above the target, and much faster at low
        # biases; then, with a higher `max_symbols`, near the bias found (a model that repeats labels on a frame
        # emits more under its own limit, so the bias it needs is no lower)
        # the second pass for TDT only: an RNN-T's repeats make it slow (and CTC has no limit)
        limit = max_symbols if head == "transducer" and model.transducer.durations else 3
        decoders = {n: GreedyRecognizer(model, head, GreedyConfig(max_symbols=n)).decode for n in {3, limit}}
        if head == "transducer" and model.transducer.durations and center_durations:
            # random duration logits pick one duration nearly everywhere (all 4: at most one label per 4 frames)
            logits = _joint_logits(model, encoder_output[inside])  # [M, V + 1 + N]
            layer, durations = _head_output(nemo_model, head)[0], len(model.transducer.durations)
            with torch.no_grad():
                layer.bias[-durations:] -= logits[:, -durations:].mean(dim=0)
        if len(marks):
            bias = _punctuation_bias(_label_logits(model, head, encoder_output[inside]), marks, punctuation_share)
            set_label_bias(nemo_model, head, marks, bias)
            biases[f"{head}_punctuation"] = bias
        emission = _Emission(nemo_model, head, decoders, encoder_output, encoder_lengths, iterations)
        biases[head] = emission.bisect_blank(1.0 / frames_per_label, limit)
    return dict(sorted(biases.items()))


@torch.no_grad()
def _joint_logits(model, frames: torch.Tensor, states: int = 16, most_frames: int = 256) -> torch.Tensor:
    """The joint's logits [M, V + 1 (+ N durations)] for up to `most_frames` of the encoder frames [F, D], each
    after `states` prediction states (the start, and after labels spread over the vocabulary)."""
    frames = frames[torch.linspace(0, len(frames) - 1, min(len(frames), most_frames)).long()]
    transducer = model.transducer
    labels = torch.linspace(0, transducer.vocab_size, states).long()  # the last is the blank: the start state
    state = transducer.initial_state(len(labels), labels.device, frames.dtype)
    prediction, _ = transducer.predict(labels, state)  # [S, P]
    logits = transducer.joint_after_projection(transducer.project_encoder(frames)[:, None],
                                               transducer.project_prediction(prediction)[None])  # [F, S, ...]
    return logits.reshape(-1, logits.shape[-1])


@torch.no_grad()
def _label_logits(model, head: str, frames: torch.Tensor) -> torch.Tensor:
    """A head's label logits [M, V + 1] (blank last) on encoder frames [F, D]: the CTC head's on every frame, the
    joint's as `_joint_logits` gives them, without TDT durations."""
    if head == "ctc":
        return model.ctc.log_probs(frames[None])[0]
    return _joint_logits(model, frames)[:, : model.transducer.vocab_size + 1]


def _punctuation_bias(logits: torch.Tensor, marks: torch.Tensor, share: float) -> float:
    """The bias on the marks' logits that makes a mark the best non-blank label in `share` of the rows."""
    labels = logits[:, :-1]  # [M, V] without the blank
    is_mark = torch.zeros(labels.shape[1], dtype=torch.bool)
    is_mark[marks] = True
    margin = labels[:, is_mark].max(dim=1).values - labels[:, ~is_mark].max(dim=1).values  # [M]
    return -float(torch.quantile(margin, 1.0 - share))


class _Emission:
    """One head's greedy emission on fixed encoder output, measured while its blank bias moves."""

    def __init__(self, nemo_model, head, decoders, encoder_output, encoder_lengths, iterations: int) -> None:
        self.nemo_model, self.head, self.decoders, self.iterations = nemo_model, head, decoders, iterations
        self.encoder_output, self.encoder_lengths = encoder_output, encoder_lengths

    def rate(self, max_symbols: int = 3) -> float:
        """Labels per frame under greedy decoding with that limit."""
        return float(self.decoders[max_symbols](self.encoder_output, self.encoder_lengths).token_lengths.sum()) / \
            float(self.encoder_lengths.sum())

    def _bisect(self, above, low: float, high: float) -> float:
        """The blank bias in [low, high] where `above()` (true while the bias is too low) turns false."""
        for _ in range(self.iterations):
            middle = (low + high) / 2
            set_blank_bias(self.nemo_model, self.head, middle)
            low, high = (middle, high) if above() else (low, middle)
        set_blank_bias(self.nemo_model, self.head, (low + high) / 2)
        return (low + high) / 2

    def bisect_blank(self, labels_per_frame: float, max_symbols: int) -> float:
        low, high = -8.0, 16.0
        bias = self._bisect(lambda: self.rate() > labels_per_frame, low, high)
        if max_symbols == 3:
            return bias
        step = (high - low) / 2 ** self.iterations
        return self._bisect(lambda: self.rate(max_symbols) > labels_per_frame, bias - step, bias + 3.0)


# how the shapes are calibrated (`calibrate_emission`): one label per 3 frames, a mark the best label but the blank
# on a quarter of the frames (a few to a fifth of the labels come out punctuation), frames
# as different as a 2-layer encoder's, a TDT prediction network heard as much as the encoder and its durations
# spread, 12 bisection steps
PRODUCTION_CALIBRATION = {"frames_per_label": 3.0, "iterations": 12, "punctuation_share": 0.25,
                          "frame_variation": 0.18, "prediction_ratio": 1.0, "max_symbols": 10,
                          "center_durations": True}


def sample_waveforms(count: int = 8) -> list[np.ndarray]:
    """The first `count` of the repository's bundled samples (`samples/*.flac`, 16 kHz speech), for calibration."""
    import soundfile

    paths = sorted((REPOSITORY / "samples").glob("*.flac"))[:count]
    if not paths:
        raise FileNotFoundError(f"no samples/*.flac under {REPOSITORY}")
    return [soundfile.read(path, dtype="float32")[0] for path in paths]


def build_checkpoint(shape: Shape, out_dir: Path, seed: int = 0, calibration_files: int = 8,
                     tokenizer_dir: Path | None = None) -> dict[str, object]:
    """Build `shape` with random weights, calibrate it on the bundled samples (`PRODUCTION_CALIBRATION`) and
    save it as `out_dir/<shape.name>.nemo`; the tokenizer is trained into `out_dir/tokenizer_<text>_<size>` unless
    given (one there already is reused). Returns what was built: path, bytes, parameters (and at full depth,
    for a reduced one), the tokenizer's properties, the calibrated biases and the seconds each step took."""
    import time

    out_dir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        seconds[step], clock = round(time.perf_counter() - clock, 1), time.perf_counter()

    tokenizer_dir = tokenizer_dir or train_tokenizer(out_dir / f"tokenizer_{shape.text}_{shape.vocab_size}",
                                                     shape.vocab_size, shape.text, seed)
    lap("tokenizer")
    model = build_random_model(shape, tokenizer_dir, seed)
    lap("build")
    biases = calibrate_emission(model, sample_waveforms(calibration_files), **PRODUCTION_CALIBRATION)
    lap("calibrate")
    path = out_dir / f"{shape.name}.nemo"
    model.save_to(str(path))
    lap("save")
    base = SHAPES.get(shape.name.removesuffix(f"-{shape.n_layers}layers"))  # the shape at its published depth
    parameters = parameter_count(model)
    missing_layers = base.n_layers - shape.n_layers if base is not None else 0
    return {
        "shape": shape.name, "path": str(path), "bytes": path.stat().st_size, "layers": shape.n_layers,
        "parameters": parameters,
        "parameters_at_full_depth": parameters + missing_layers * encoder_layer_parameters(model),
        "tokenizer": tokenizer_properties(tokenizer_dir), "biases": {k: round(v, 4) for k, v in biases.items()},
        "seconds": seconds,
    }
