"""Small random NeMo models, a SentencePiece tokenizer and spoken audio files, made on the spot.

Used by the `nemo` tests and by `benchmarks/nemo_greedy.py`. Imports NeMo, so import this module only where
NeMo is installed. The model configs follow the layout of NeMo's example configs
(`examples/asr/conf/fastconformer/fast-conformer_transducer_bpe.yaml`, `fast-conformer_ctc_bpe.yaml`,
`hybrid_transducer_ctc/fastconformer_hybrid_tdt_ctc_bpe.yaml`), scaled down to 2 layers and d_model 128
(about 1 M parameters), without the training sections.

A random transducer emits `max_symbols` labels on every frame, unlike a trained model; `calibrate_emission`
raises the blank logit's bias (joint and CTC head) until greedy decoding emits about one label per 3 frames.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import soundfile
import torch

KINDS = ("rnnt", "tdt_ctc", "ctc")
SAMPLE_RATE = 16000

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "she sells sea shells by the sea shore",
    "a stitch in time saves nine",
    "all that glitters is not gold",
    "the early bird catches the worm",
    "actions speak louder than words",
    "better late than never",
    "every cloud has a silver lining",
    "fortune favours the bold",
    "where there is a will there is a way",
    "birds of a feather flock together",
    "an apple a day keeps the doctor away",
]


def train_tokenizer(out_dir: Path, vocab_size: int = 64, sentences: Sequence[str] = SENTENCES) -> Path:
    """A SentencePiece BPE tokenizer in the folder layout NeMo expects (tokenizer.model, .vocab, vocab.txt)."""
    from nemo.collections.common.tokenizers.sentencepiece_tokenizer import create_spt_model

    out_dir.mkdir(parents=True, exist_ok=True)
    text_file = out_dir / "text.txt"
    text_file.write_text("\n".join(list(sentences) * 4) + "\n")
    create_spt_model(str(text_file), vocab_size, sample_size=-1, do_lower_case=True, tokenizer_type="bpe",
                     output_dir=str(out_dir))
    return out_dir


def fastconformer_config(kind: Literal["rnnt", "tdt_ctc", "ctc"], tokenizer_dir: Path, d_model: int = 128,
                         n_layers: int = 2, hidden: int = 128) -> dict:
    """A NeMo model config (the `model:` section) for a small FastConformer of the given kind."""
    config: dict = {
        "sample_rate": SAMPLE_RATE,
        "tokenizer": {"dir": str(tokenizer_dir), "type": "bpe"},
        # no data sets, but transcribe() reads validation_ds.use_start_end_token
        "validation_ds": {"manifest_filepath": None, "sample_rate": SAMPLE_RATE, "batch_size": 4, "shuffle": False,
                          "use_start_end_token": False},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": SAMPLE_RATE, "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01,
            "window": "hann", "features": 80, "n_fft": 512, "frame_splicing": 1, "dither": 0.00001, "pad_to": 0,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": 80, "feat_out": -1, "n_layers": n_layers, "d_model": d_model,
            "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": 64,
            "causal_downsampling": False, "ff_expansion_factor": 2, "self_attention_model": "rel_pos",
            "n_heads": 4, "att_context_size": [-1, -1], "xscaling": True, "untie_biases": True,
            "pos_emb_max_len": 5000, "conv_kernel_size": 9, "conv_norm_type": "batch_norm",
            "dropout": 0.1, "dropout_pre_encoder": 0.1, "dropout_emb": 0.0, "dropout_att": 0.1,
        },
    }
    ctc_decoder = {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": None if kind != "ctc"
                   else d_model, "num_classes": -1, "vocabulary": []}
    if kind == "ctc":
        config["decoder"] = ctc_decoder
        config["decoding"] = {"strategy": "greedy_batch"}
        return config
    durations = [0, 1, 2, 3, 4]
    config["model_defaults"] = {"enc_hidden": d_model, "pred_hidden": hidden, "joint_hidden": hidden}
    config["decoder"] = {
        "_target_": "nemo.collections.asr.modules.RNNTDecoder", "normalization_mode": None,
        "random_state_sampling": False, "blank_as_pad": True,
        "prednet": {"pred_hidden": hidden, "pred_rnn_layers": 1, "t_max": None, "dropout": 0.1},
    }
    config["joint"] = {
        "_target_": "nemo.collections.asr.modules.RNNTJoint", "log_softmax": None, "preserve_memory": False,
        "fuse_loss_wer": False, "jointnet": {"joint_hidden": hidden, "activation": "relu", "dropout": 0.1},
    }
    config["decoding"] = {"strategy": "greedy_batch", "greedy": {"max_symbols": 10}}
    config["loss"] = {"loss_name": "default"}
    if kind == "tdt_ctc":
        config["model_defaults"].update(tdt_durations=durations, num_tdt_durations=len(durations))
        config["joint"]["num_extra_outputs"] = len(durations)
        config["decoding"].update(model_type="tdt", durations=durations)
        config["loss"] = {"loss_name": "tdt", "tdt_kwargs": {"durations": durations, "sigma": 0.02, "omega": 0.1}}
        config["aux_ctc"] = {"ctc_loss_weight": 0.3, "use_cer": False, "ctc_reduction": "mean_batch",
                             "decoder": ctc_decoder, "decoding": {"strategy": "greedy_batch"}}
    return config


def build_random_model(kind: Literal["rnnt", "tdt_ctc", "ctc"], tokenizer_dir: Path, seed: int = 0, **sizes):
    """A randomly initialized NeMo ASR model in eval mode on the CPU."""
    from lightning.pytorch import seed_everything
    from nemo.collections.asr.models import EncDecCTCModelBPE, EncDecHybridRNNTCTCBPEModel, EncDecRNNTBPEModel
    from omegaconf import OmegaConf

    seed_everything(seed, verbose=False)
    config = OmegaConf.create(fastconformer_config(kind, tokenizer_dir, **sizes))
    model_class = {"rnnt": EncDecRNNTBPEModel, "tdt_ctc": EncDecHybridRNNTCTCBPEModel, "ctc": EncDecCTCModelBPE}[kind]
    return model_class(cfg=config).eval()


def synthesize(out_dir: Path, sentences: Sequence[str] = SENTENCES, seed: int = 0) -> list[Path]:
    """16 kHz mono WAV files of the sentences: espeak-ng where installed, else a deterministic chirp-and-noise.

    Voices and speeds vary so the files have different lengths.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    espeak = shutil.which("espeak-ng")
    voices = ["en-us", "en-gb", "en-gb-scotland", "en-029"]
    for index, sentence in enumerate(sentences):
        path = out_dir / f"utt{index:03d}.wav"
        audio = None
        if espeak is not None:
            with tempfile.TemporaryDirectory() as tmp:
                raw = Path(tmp) / "raw.wav"
                speed = 140 + 20 * (index % 5)
                result = subprocess.run([espeak, "-v", voices[index % len(voices)], "-s", str(speed), "-w", str(raw),
                                         sentence], capture_output=True)
                if result.returncode == 0 and raw.exists():
                    audio, rate = soundfile.read(raw, dtype="float32")
                    audio = _resample(audio, rate, SAMPLE_RATE)
        if audio is None:
            seconds = 0.5 + 0.25 * len(sentence.split())
            time = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
            audio = 0.3 * np.sin(2 * np.pi * (200 + 300 * time) * time)
        audio = audio + 0.003 * rng.standard_normal(len(audio))
        soundfile.write(path, np.clip(audio, -1, 1).astype(np.float32), SAMPLE_RATE, subtype="PCM_16")
        paths.append(path)
    return paths


def _resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    if rate == target:
        return audio
    positions = np.arange(int(len(audio) * target / rate)) * (rate / target)
    return np.interp(positions, np.arange(len(audio)), audio).astype(np.float32)


def set_blank_bias(nemo_model, head: Literal["transducer", "ctc"], bias: float) -> None:
    """Add `bias` to the blank logit's bias of the joint (transducer) or the CTC head, relative to as built."""
    if head == "transducer":
        layer = nemo_model.joint.joint_net[-1]
        blank_id = nemo_model.joint.num_classes_with_blank - 1 - nemo_model.joint.num_extra_outputs
    else:
        ctc = nemo_model.ctc_decoder if hasattr(nemo_model, "ctc_decoder") else nemo_model.decoder
        layer = ctc.decoder_layers[0]
        blank_id = ctc.num_classes_with_blank - 1
    with torch.no_grad():
        if not hasattr(layer, "_base_blank_bias"):
            layer._base_blank_bias = float(layer.bias[blank_id])
        layer.bias[blank_id] = layer._base_blank_bias + bias


def calibrate_emission(nemo_model, waveforms: Sequence[np.ndarray], frames_per_label: float = 3.0,
                       iterations: int = 8, encoder_scale: float = 1.0,
                       prediction_scale: float = 1.0) -> dict[str, float]:
    """Make a random model emit about one label per `frames_per_label` under our greedy decoding.

    A random transducer's emissions feed themselves (a label changes the prediction network's output, which
    makes the next label likely), and its encoder output is nearly the same on every frame, so it runs
    `max_symbols` labels on every frame or on none. Centering the joint's encoder projection on the mean encoder
    output, scaling it up by `encoder_scale` and the prediction projection down by `prediction_scale` lets the
    frames lead, as in a trained model. A random CTC head has the same flat argmax (one long run of one label):
    its logits are centered the same way. Then each head's blank bias is bisected.
    """
    from decoders.transducer.greedy import GreedyConfig
    from pipeline.decoding.recognize import GreedyRecognizer, pad_waveforms
    from pipeline.model.nemo import AsrModel

    model = AsrModel(nemo_model)
    audio, lengths = pad_waveforms(waveforms)
    encoder_output, encoder_lengths = model.encode(audio, lengths)
    frames = float(encoder_lengths.sum())
    with torch.no_grad():
        inside = torch.arange(encoder_output.shape[1]) < encoder_lengths.unsqueeze(1)  # [B, T]
        mean = encoder_output[inside].mean(dim=0)  # [D]
        if model.transducer is not None:
            joint, transducer = model.transducer.joint, model.transducer
            joint.enc.bias -= joint.enc.weight @ mean
            labels = torch.arange(transducer.vocab_size + 1)  # one step after each label (blank = start)
            state = transducer.initial_state(len(labels), labels.device, encoder_output.dtype)
            prediction, _ = transducer.predict(labels, state)  # [V, P]
            joint.pred.bias -= joint.pred.weight @ prediction.mean(dim=0)
            joint.enc.weight.mul_(encoder_scale)
            joint.pred.weight.mul_(prediction_scale)
        if model.ctc is not None:
            layer = model.ctc.head.decoder_layers[0]  # Conv1d(D, V, 1)
            layer.bias -= layer.weight[:, :, 0] @ mean
    biases = {}
    for head in model.heads:
        # at most 3 labels per frame while bisecting: far above the target, and much faster at low biases
        recognizer = GreedyRecognizer(model, head, GreedyConfig(max_symbols=3))
        low, high = -8.0, 16.0
        for _ in range(iterations):
            middle = (low + high) / 2
            set_blank_bias(nemo_model, head, middle)
            rate = float(recognizer.decode(encoder_output, encoder_lengths).token_lengths.sum()) / frames
            low, high = (middle, high) if rate > 1.0 / frames_per_label else (low, middle)
        set_blank_bias(nemo_model, head, (low + high) / 2)
        biases[head] = (low + high) / 2
    return biases
