"""NeMo checkpoints: fetch a `.nemo` once per node, load it safely, and adapt it to the decoders' protocols.

This is the one module that knows NeMo (imported lazily, so the rest of the project runs without it).

- `load_asr_model(uri)` takes a local path, `s3://`, `gs://` or any fsspec URI. Remote files are downloaded
  once per node into a content-addressed cache (`blobs/<sha256>.nemo`), under a file lock and with an atomic
  rename, so concurrent actors on one node share one copy and never read a partial file. An expected sha256,
  when given, is checked before anything is unpickled.
- `AsrModel` exposes what decoding needs: `sample_rate`, `frame_shift_s` (seconds per encoder frame),
  `encode(waveforms, lengths)`, `max_symbols` (the checkpoint's greedy setting), `transducer` (a
  `TransducerModel` over NeMo's prediction network and joint, RNN-T or TDT), `ctc` (a `CtcModel` over the CTC
  head of CTC and hybrid models) and `tokenizer`.
- `read_model_layout(path)` reads what text and timestamps need (SentencePiece tokenizer, frame timing, head
  layouts) straight from the `.nemo` tar, with neither NeMo nor the weights: the CPU writer stage uses it.

Trust: a `.nemo` file holds a pickled torch checkpoint and a config that names classes to build. Loading
restores weights with `torch.load(weights_only=True)` and NeMo 3.0 checks every config `_target_` against its
allow-list, but a checkpoint can still make the loader run code it should not: load models only from
buckets you trust, and pin their sha256.

Dims: B batch, S samples, T encoder frames, D encoder features, H joint hidden, P prediction output,
V labels with blank, N TDT durations.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from decoders.protocols import PredictorState

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "loopscribe" / "models"
_CHUNK_BYTES = 8 << 20

Head = Literal["transducer", "ctc"]


# --- fetching ----------------------------------------------------------------------------------------------
def _is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def _local_path(uri: str) -> Path:
    return Path(uri[len("file://"):] if uri.startswith("file://") else uri).expanduser()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock held across processes on this node (released if the holder dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_atomically(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, prefix=".tmp-") as handle:
        handle.write(text)
    os.replace(handle.name, path)


def fetch_model(uri: str, sha256: str | None = None, cache_dir: Path | str = DEFAULT_CACHE_DIR,
                suffix: str = ".nemo") -> Path:
    """A local path holding the file at `uri` (a checkpoint, or an LM): the file itself if local, else a
    node-local cached copy named `<sha256><suffix>`.

    The cache is content-addressed: `blobs/<sha256>.nemo` holds the bytes, and `refs/<key>.json` maps a
    remote object (URI, size and ETag or mtime) to its blob, so an object that changes is downloaded again.
    A download streams into a temporary file beside the blob while hashing, checks `sha256` if given, and
    renames into place; the per-object lock makes concurrent callers wait for one download.
    """
    expected = sha256.lower() if sha256 else None
    if _is_local(uri):
        path = _local_path(uri)
        if not path.is_file():
            raise FileNotFoundError(f"no model file at {uri}")
        if expected is not None and file_sha256(path) != expected:
            raise ValueError(f"sha256 of {uri} is not the expected {expected}")
        return path

    import fsspec

    cache = Path(cache_dir)
    blobs, refs, locks = cache / "blobs", cache / "refs", cache / "locks"
    for folder in (blobs, refs, locks):
        folder.mkdir(parents=True, exist_ok=True)
    if expected is not None and (blobs / f"{expected}{suffix}").is_file():
        return blobs / f"{expected}{suffix}"  # only fully hashed files are ever renamed into blobs/

    # a new filesystem object: a cached one would keep the endpoint and credentials it was made with
    filesystem, remote_path = fsspec.core.url_to_fs(uri, skip_instance_cache=True)
    info = filesystem.info(remote_path)
    version = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or ""
    key = hashlib.sha256(f"{uri}\n{info.get('size')}\n{version}".encode()).hexdigest()
    ref = refs / f"{key}.json"
    with _file_lock(locks / f"{key}.lock"):
        if ref.is_file():
            digest = json.loads(ref.read_text())["sha256"]
            blob = blobs / f"{digest}{suffix}"
            if blob.is_file():
                if expected is not None and digest != expected:
                    raise ValueError(f"sha256 of {uri} is {digest}, not the expected {expected}")
                return blob
        digest_state = hashlib.sha256()
        with tempfile.NamedTemporaryFile(dir=blobs, delete=False, prefix=".download-") as partial:
            try:
                with filesystem.open(remote_path, "rb") as source:
                    while chunk := source.read(_CHUNK_BYTES):
                        digest_state.update(chunk)
                        partial.write(chunk)
                partial.flush()
                os.fsync(partial.fileno())
            except BaseException:
                os.unlink(partial.name)
                raise
        digest = digest_state.hexdigest()
        if expected is not None and digest != expected:
            os.unlink(partial.name)
            raise ValueError(f"sha256 of {uri} is {digest}, not the expected {expected}")
        blob = blobs / f"{digest}{suffix}"
        os.replace(partial.name, blob)
        _write_atomically(ref, json.dumps({"uri": uri, "sha256": digest, "size": info.get("size")}))
        return blob


def read_nemo_config(path: Path | str) -> dict[str, Any]:
    """The model config stored in a `.nemo` tar (`model_config.yaml`), read without NeMo or unpickling."""
    import tarfile

    with tarfile.open(path, "r:*") as archive:
        return _config_in(archive, path)


def _config_in(archive: Any, path: Path | str) -> dict[str, Any]:
    import yaml

    for member in archive.getmembers():
        if member.isfile() and member.name.rsplit("/", 1)[-1] == "model_config.yaml":
            handle = archive.extractfile(member)
            assert handle is not None
            return yaml.safe_load(handle.read().decode("utf-8")) or {}
    raise ValueError(f"{path}: no model_config.yaml inside (not a .nemo file?)")


def sample_rate_of(config: dict[str, Any]) -> int:
    """The sample rate a model expects its audio at, from its config (`read_nemo_config`)."""
    rate = config.get("sample_rate") or (config.get("preprocessor") or {}).get("sample_rate")
    if not rate:
        raise ValueError("the model config names no sample_rate")
    return int(rate)


# --- adapters ----------------------------------------------------------------------------------------------
class NemoTransducer:
    """`TransducerModel` over a NeMo RNN-T or TDT prediction network (`decoder`) and `joint`.

    The joint returns raw logits (divided by the joint's temperature), as NeMo's joint does on a GPU; on the
    CPU NeMo's adds a log-softmax over all outputs (labels and durations together), which changes no argmax.
    A joint with adapters (checked once, here) goes through NeMo's own `joint_after_projection`.
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

    def project_encoder(self, encoder_output: Tensor) -> Tensor:
        return self.joint.project_encoder(encoder_output)

    def initial_state(self, batch_size: int, device, dtype) -> PredictorState:
        like = torch.empty(batch_size, 1, device=device, dtype=dtype)
        return tuple(self.decoder.initialize_state(like))

    def predict(self, labels: Tensor, state: PredictorState) -> tuple[Tensor, PredictorState]:
        output, next_state, *_ = self.decoder.predict(labels.unsqueeze(1), list(state) if state is not None
                                                      else None, add_sos=False, batch_size=labels.shape[0])
        return output[:, 0], tuple(next_state)  # [B, P]

    def project_prediction(self, prediction: Tensor) -> Tensor:
        return self.joint.project_prednet(prediction)

    def joint_after_projection(self, encoder_projected: Tensor, prediction_projected: Tensor) -> Tensor:
        if self._plain_joint:
            # NeMo's joint_after_projection minus its CPU-only log-softmax (the decoder normalizes the labels it
            # scores; argmaxes are unchanged) and minus its [B, T, U] reshaping: any broadcastable shapes work
            logits = self.joint.joint_net(encoder_projected + prediction_projected)
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


@dataclass(frozen=True)
class _ModelInfo:
    kind: str  # "rnnt", "tdt", "ctc", "hybrid_rnnt_ctc" or "hybrid_tdt_ctc"
    durations: tuple[int, ...]


def _describe(config: Any) -> _ModelInfo:
    """A NeMo ASR model's kind and TDT durations, from its config (a dict or NeMo's DictConfig)."""
    has_transducer = "joint" in config
    has_ctc = "aux_ctc" in config or not has_transducer
    durations: tuple[int, ...] = ()
    if has_transducer:
        decoding = config.get("decoding", {}) or {}
        defaults = config.get("model_defaults", {}) or {}
        extra_outputs = (config.get("joint", {}) or {}).get("num_extra_outputs", 0) or 0
        if not isinstance(extra_outputs, int):  # an unresolved interpolation, read without OmegaConf
            raise ValueError(f"joint.num_extra_outputs is not a number: {extra_outputs!r}")
        if decoding.get("model_type") == "tdt" or extra_outputs > 0:
            found = decoding.get("durations") or defaults.get("tdt_durations")
            if not found:
                raise ValueError("a TDT model must name its durations in decoding.durations or "
                                 "model_defaults.tdt_durations")
            durations = tuple(int(d) for d in found)
        transducer_kind = "tdt" if durations else "rnnt"
        kind = f"hybrid_{transducer_kind}_ctc" if has_ctc else transducer_kind
    else:
        kind = "ctc"
    return _ModelInfo(kind=kind, durations=durations)


class AsrModel:
    """A NeMo ASR model as decoders see it: encoder, transducer and/or CTC head, tokenizer, frame timing."""

    def __init__(self, nemo_model: Any) -> None:
        nemo_model.eval()
        self.nemo_model = nemo_model
        info = _describe(nemo_model.cfg)
        self.kind = info.kind
        preprocessor = nemo_model.preprocessor
        featurizer = getattr(preprocessor, "featurizer", None)
        if featurizer is not None:
            # as NeMo's transcribe(): no dither, no padding of the features to a multiple of frames
            if hasattr(featurizer, "dither"):
                featurizer.dither = 0.0
            if hasattr(featurizer, "pad_to"):
                featurizer.pad_to = 0
        self.sample_rate = int(nemo_model.cfg.get("sample_rate") or nemo_model.cfg.preprocessor.sample_rate)
        self.frame_shift_s = float(nemo_model.cfg.preprocessor.window_stride) * int(
            nemo_model.encoder.subsampling_factor)
        self.transducer = (NemoTransducer(nemo_model.decoder, nemo_model.joint, info.durations)
                           if hasattr(nemo_model, "joint") else None)
        ctc_head = getattr(nemo_model, "ctc_decoder", None) if self.transducer is not None else nemo_model.decoder
        self.ctc = NemoCtcHead(ctc_head) if ctc_head is not None else None
        decoding = getattr(nemo_model, "decoding", None) or getattr(nemo_model, "ctc_decoding", None)
        self.tokenizer = NemoTokenizer(nemo_model.tokenizer, getattr(decoding, "supported_punctuation", None))
        greedy = (nemo_model.cfg.get("decoding", {}) or {}).get("greedy", {}) or {}
        self.max_symbols = int(greedy.get("max_symbols") or 10)  # NeMo's per-frame limit for this checkpoint
        self.heads: tuple[Head, ...] = tuple(h for h, m in (("transducer", self.transducer), ("ctc", self.ctc))
                                             if m is not None)

    @property
    def device(self) -> torch.device:
        return next(self.nemo_model.parameters()).device

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


# --- layout without NeMo ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HeadLayout:
    """A head's labels: 0..vocab_size-1 are tokens, `blank_id` (= vocab_size) is the blank; TDT durations."""

    vocab_size: int
    blank_id: int
    durations: tuple[int, ...] = ()


class SentencePieceText:
    """Token ids -> pieces -> text with SentencePiece itself, as NeMo's (non-legacy) `SentencePieceTokenizer`
    does, and the punctuation marks NeMo's decoding finds in the vocabulary (`extract_punctuation_from_vocab`:
    punctuation characters of pieces that are not special, not word-initial and not blank)."""

    def __init__(self, model_proto: bytes) -> None:
        import sentencepiece

        self.processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        self.vocab_size = int(self.processor.get_piece_size())
        pieces = [self.processor.id_to_piece(i) for i in range(self.vocab_size)]
        self.punctuation = frozenset(
            char for piece in pieces if not _is_special_piece(piece)
            for char in piece if unicodedata.category(char).startswith("P"))

    def ids_to_pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.processor.id_to_piece(int(i)) for i in ids]

    def pieces_to_text(self, pieces: Sequence[str]) -> str:
        return self.processor.decode_pieces(list(pieces))

    def ids_to_text(self, ids: Sequence[int]) -> str:
        return self.processor.decode_ids([int(i) for i in ids])


def _is_special_piece(piece: str) -> bool:
    return (piece.strip() == "" or piece.startswith(("\u2581", "##"))
            or (piece.startswith("[") and piece.endswith("]")) or (piece.startswith("<") and piece.endswith(">")))


class LayoutUnavailable(ValueError):
    """The `.nemo` file's tokenizer or encoder is not one `read_model_layout` reads: load the model instead."""


@dataclass(frozen=True)
class ModelLayout:
    """What turning token ids into text and timestamps needs of a model, without its weights: tokenizer, frame
    timing and head layouts. Read from the `.nemo` file by `read_model_layout`, without NeMo or unpickling;
    wherever `AsrModel` is only asked these things (the writer stage), a `ModelLayout` serves instead.
    """

    kind: str
    sample_rate: int
    frame_shift_s: float
    tokenizer: SentencePieceText
    transducer: HeadLayout | None
    ctc: HeadLayout | None

    @property
    def heads(self) -> tuple[Head, ...]:
        return tuple(h for h, m in (("transducer", self.transducer), ("ctc", self.ctc)) if m is not None)


def read_model_layout(path: Path | str) -> ModelLayout:
    """A `.nemo` file -> its `ModelLayout`, for models with a SentencePiece tokenizer (NeMo's `bpe` type) and
    an encoder whose config names its `subsampling_factor` (Conformer, FastConformer); anything else raises
    `LayoutUnavailable`."""
    import tarfile

    with tarfile.open(path, "r:*") as archive:
        config = _config_in(archive, path)
        members = {m.name.rsplit("/", 1)[-1]: m for m in archive.getmembers() if m.isfile()}
        tokenizer = config.get("tokenizer") or {}
        model_path = str(tokenizer.get("model_path") or "")
        if tokenizer.get("type") != "bpe" or "custom_tokenizer" in tokenizer or not model_path.startswith("nemo:"):
            raise LayoutUnavailable(f"{path}: the tokenizer is not a bundled SentencePiece model")
        member = members.get(model_path[len("nemo:"):])
        if member is None:
            raise LayoutUnavailable(f"{path}: {model_path} is not inside the file")
        text = SentencePieceText(archive.extractfile(member).read())
    try:
        info = _describe(config)
        frame_shift_s = float(config["preprocessor"]["window_stride"]) * int(config["encoder"]["subsampling_factor"])
    except (KeyError, TypeError, ValueError) as error:
        raise LayoutUnavailable(f"{path}: cannot read the model's layout from its config ({error})") from error
    # NeMo's BPE models give every head the tokenizer's labels, with the blank after them
    vocab_size = text.vocab_size
    return ModelLayout(
        kind=info.kind, sample_rate=sample_rate_of(config), frame_shift_s=frame_shift_s, tokenizer=text,
        transducer=HeadLayout(vocab_size, vocab_size, info.durations) if info.kind != "ctc" else None,
        ctc=HeadLayout(vocab_size, vocab_size) if info.kind == "ctc" or info.kind.startswith("hybrid") else None)


def _safe_connector():
    """NeMo's SaveRestoreConnector with weights loaded by `torch.load(weights_only=True)`, whatever the env."""
    from nemo.core.connectors.save_restore_connector import SaveRestoreConnector

    class WeightsOnlyConnector(SaveRestoreConnector):
        @staticmethod
        def _load_state_dict_from_disk(model_weights, map_location="cpu"):
            return torch.load(model_weights, map_location=map_location, weights_only=True)

    return WeightsOnlyConnector()


def load_asr_model(uri: str, sha256: str | None = None, cache_dir: Path | str = DEFAULT_CACHE_DIR,
                   device: str | torch.device = "cpu") -> AsrModel:
    """Fetch (once per node) and load a NeMo RNN-T, TDT, CTC or hybrid `.nemo`. Load only trusted files."""
    path = fetch_model(uri, sha256=sha256, cache_dir=cache_dir)
    from nemo.collections.asr.models import ASRModel

    nemo_model = ASRModel.restore_from(str(path), map_location=torch.device(device),
                                       save_restore_connector=_safe_connector())
    return AsrModel(nemo_model)
