"""What a `.nemo` file says about its model, read straight from the tar: no NeMo, no weights, no unpickling.

The one reader of `.nemo` facts, used by the driver (to refuse a decoding before any actor starts), by the
NeMo adapter (`pipeline/model/nemo.py`, which reads the same facts from the loaded model's config), by the
writer stage (tokenizer and frame timing, `read_model_layout`) and by the LM builder (the tokenizer).

- `ModelFacts`: kind, heads, TDT durations, sample rate, the checkpoint's `max_symbols`; `model_facts(config)`,
  which first refuses a model loopscribe cannot decode (`UnsupportedModel`: an attention encoder-decoder such as
  Canary, a character-level model, a classifier), naming the kinds it supports (`SUPPORTED_MODELS`).
- `ModelLayout`: what text and timestamps need (SentencePiece tokenizer, frame timing, head layouts).
- `sentencepiece_model(path)`: the bundled SentencePiece model's bytes.
"""

from __future__ import annotations

import tarfile
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from decoders.pieces import WORD_START

Head = Literal["transducer", "ctc"]
DEFAULT_MAX_SYMBOLS = 10  # NeMo's per-frame label limit when a checkpoint names none

# NeMo's model classes (a config's `target`) that loopscribe decodes, and what they are
SUPPORTED_MODELS = {
    "EncDecRNNTBPEModel": "RNN-T or TDT transducer",
    "EncDecCTCModelBPE": "CTC",
    "EncDecHybridRNNTCTCBPEModel": "hybrid RNN-T or TDT transducer + CTC",
}
# what the others are, for the refusal's message
_UNSUPPORTED_MODELS = {
    "EncDecMultiTaskModel": "an attention encoder-decoder (Canary)",
    "EncDecTransfModelBPE": "an attention encoder-decoder",
    "SALM": "a speech-LLM",
    "EncDecRNNTModel": "a transducer over characters, not SentencePiece pieces",
    "EncDecCTCModel": "a CTC model over characters, not SentencePiece pieces",
    "EncDecHybridRNNTCTCModel": "a hybrid model over characters, not SentencePiece pieces",
    "EncDecClassificationModel": "a classifier",
    "EncDecFrameClassificationModel": "a frame classifier (VAD)",
    "EncDecSpeakerLabelModel": "a speaker model",
    "SortformerEncLabelModel": "a diarizer",
}
# config sections that only attention encoder-decoders have (for a config that names no class)
_ENCODER_DECODER_SECTIONS = ("transf_decoder", "transf_encoder", "prompt_format")


class UnsupportedModel(ValueError):
    """A model loopscribe cannot decode: its message names what the model is and the kinds loopscribe decodes."""


def supported_models_line() -> str:
    return "loopscribe decodes NeMo's " + ", ".join(f"{name} ({what})" for name, what in SUPPORTED_MODELS.items())


def check_supported(config: Any) -> None:
    """Raise `UnsupportedModel` unless the config (`read_nemo_config`, or a loaded model's) is of a model class
    loopscribe decodes. NeMo writes the class into every saved config (`target`); a config without one is judged
    by its sections: an attention decoder, or neither a transducer (`joint`) nor a CTC `decoder`, is refused."""
    target = config.get("target")
    if target:
        name = str(target).rsplit(".", 1)[-1]
        if name not in SUPPORTED_MODELS:
            what = _UNSUPPORTED_MODELS.get(name, "not a transducer or CTC model loopscribe knows")
            raise UnsupportedModel(f"the model is NeMo's {name}, {what}; {supported_models_line()}")
        return
    sections = [key for key in _ENCODER_DECODER_SECTIONS if key in config]
    if sections:
        raise UnsupportedModel(f"the model's config has {', '.join(sections)}: an attention encoder-decoder; "
                               f"{supported_models_line()}")
    if "joint" not in config and "decoder" not in config:
        raise UnsupportedModel(f"the model's config has neither a transducer joint nor a CTC decoder; "
                               f"{supported_models_line()}")


def read_nemo_config(path: Path | str) -> dict[str, Any]:
    """The model config stored in a `.nemo` tar (`model_config.yaml`), read without NeMo or unpickling."""
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



@dataclass(frozen=True)
class ModelFacts:
    """What decoding decisions need to know of a model, from its config alone."""

    kind: str  # "rnnt", "tdt", "ctc", "hybrid_rnnt_ctc" or "hybrid_tdt_ctc"
    durations: tuple[int, ...]  # TDT durations; empty for RNN-T and CTC
    sample_rate: int
    max_symbols: int  # the checkpoint's greedy labels-per-frame limit
    encoder_attention: str | None = None  # the encoder's `self_attention_model` (Conformers: rel_pos, ...)

    @property
    def heads(self) -> tuple[Head, ...]:
        """The model's heads, the transducer first where there is one (NeMo's default head of a hybrid)."""
        return (("transducer",) if self.kind != "ctc" else ()) + (
            ("ctc",) if self.kind == "ctc" or self.kind.startswith("hybrid") else ())

    @property
    def is_tdt(self) -> bool:
        return bool(self.durations)


def model_facts(config: Any) -> ModelFacts:
    """A NeMo ASR model's facts from its config (a dict from `read_nemo_config`, or NeMo's DictConfig); raises
    `UnsupportedModel` for a model loopscribe cannot decode."""
    check_supported(config)
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
    greedy = (config.get("decoding", {}) or {}).get("greedy", {}) or {}
    attention = (config.get("encoder", {}) or {}).get("self_attention_model")
    return ModelFacts(kind=kind, durations=durations, sample_rate=sample_rate_of(config),
                      max_symbols=int(greedy.get("max_symbols") or DEFAULT_MAX_SYMBOLS),
                      encoder_attention=str(attention) if attention else None)


def read_model_facts(path: Path | str) -> ModelFacts:
    """`model_facts` of a `.nemo` file; an `UnsupportedModel` names the file."""
    try:
        return model_facts(read_nemo_config(path))
    except UnsupportedModel as error:
        raise UnsupportedModel(f"{path}: {error}") from None


def sentencepiece_model(path: Path | str) -> bytes:
    """The SentencePiece model a `.nemo` bundles (its config's `tokenizer.model_path`), or a `.model` file's
    bytes. Raises `LayoutUnavailable` for a `.nemo` whose tokenizer is not a bundled SentencePiece model."""
    if not str(path).endswith(".nemo"):
        return Path(path).read_bytes()
    with tarfile.open(path, "r:*") as archive:
        return _sentencepiece_in(archive, _config_in(archive, path), path)


def _sentencepiece_in(archive: Any, config: dict[str, Any], path: Path | str) -> bytes:
    tokenizer = config.get("tokenizer") or {}
    model_path = str(tokenizer.get("model_path") or "")
    if tokenizer.get("type") != "bpe" or "custom_tokenizer" in tokenizer or not model_path.startswith("nemo:"):
        raise LayoutUnavailable(f"{path}: the tokenizer is not a bundled SentencePiece model")
    members = {m.name.rsplit("/", 1)[-1]: m for m in archive.getmembers() if m.isfile()}
    member = members.get(model_path[len("nemo:"):])
    if member is None:
        raise LayoutUnavailable(f"{path}: {model_path} is not inside the file")
    handle = archive.extractfile(member)
    assert handle is not None
    return handle.read()


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
    return (piece.strip() == "" or piece.startswith((WORD_START, "##"))
            or (piece.startswith("[") and piece.endswith("]")) or (piece.startswith("<") and piece.endswith(">")))


class LayoutUnavailable(ValueError):
    """The `.nemo` file's tokenizer or encoder is not one `read_model_layout` reads: load the model instead."""


@dataclass(frozen=True)
class ModelLayout:
    """What turning token ids into text and timestamps needs of a model, without its weights: tokenizer, frame
    timing and head layouts. Read from the `.nemo` file by `read_model_layout`, without NeMo or unpickling;
    wherever `AsrModel` is only asked these things (the writer stage), a `ModelLayout` serves instead.
    """

    facts: ModelFacts
    frame_shift_s: float
    tokenizer: SentencePieceText
    transducer: HeadLayout | None
    ctc: HeadLayout | None

    @property
    def kind(self) -> str:
        return self.facts.kind

    @property
    def sample_rate(self) -> int:
        return self.facts.sample_rate

    @property
    def heads(self) -> tuple[Head, ...]:
        return self.facts.heads


def read_model_layout(path: Path | str) -> ModelLayout:
    """A `.nemo` file -> its `ModelLayout`, for models with a SentencePiece tokenizer (NeMo's `bpe` type) and
    an encoder whose config names its `subsampling_factor` (Conformer, FastConformer); anything else raises
    `LayoutUnavailable`, and a model loopscribe cannot decode at all `UnsupportedModel`."""
    with tarfile.open(path, "r:*") as archive:
        config = _config_in(archive, path)
        try:
            check_supported(config)  # refused as such, not as a layout to load the model for
        except UnsupportedModel as error:
            raise UnsupportedModel(f"{path}: {error}") from None
        text = SentencePieceText(_sentencepiece_in(archive, config, path))
    try:
        facts = model_facts(config)
        frame_shift_s = float(config["preprocessor"]["window_stride"]) * int(config["encoder"]["subsampling_factor"])
    except (KeyError, TypeError, ValueError) as error:
        raise LayoutUnavailable(f"{path}: cannot read the model's layout from its config ({error})") from error
    # NeMo's BPE models give every head the tokenizer's labels, with the blank after them
    vocab_size = text.vocab_size
    return ModelLayout(
        facts=facts, frame_shift_s=frame_shift_s, tokenizer=text,
        transducer=HeadLayout(vocab_size, vocab_size, facts.durations) if "transducer" in facts.heads else None,
        ctc=HeadLayout(vocab_size, vocab_size) if "ctc" in facts.heads else None)
