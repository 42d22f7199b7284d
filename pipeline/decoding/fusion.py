"""What the decoders fuse, loaded for a plan: the n-gram LM and the phrase-boosting tree.

`load_language_model` fetches the plan's LM once per node through the cache: the binary of `python
jobs/build_lm.py` (memory-mapped), a token-level ARPA as it is, or a word-level ARPA converted for the model's
tokenizer (`pipeline/lm/word_arpa.py`); `lm_problem` is the driver's cheap look at an LM file before any actor starts.
`PhraseTokenizer` spells a phrase in the model's SentencePiece pieces, `boosting_from_phrase_file` builds the
`decoders.boosting.tree.PhraseBoosting` tree of a phrase list, and `load_fusion_parts` / `load_fusion_model` give a
stage what its decoder fuses (`DecodingPlan.fusion_model` decides how the two are weighted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from decoders.pieces import WORD_START
from pipeline.decoding.plan import DecodingPlan

if TYPE_CHECKING:
    from decoders.ngram import NgramLm
    from decoders.protocols import LanguageModel
    from pipeline.model import AsrModel, ModelLayout


def load_language_model(plan: DecodingPlan, vocab_size: int, cache_dir: str, tokenizer: Any = None
                        ) -> NgramLm | None:
    """The plan's n-gram LM (None when the plan fuses none), fetched once per node through the cache; the
    decoder that fuses it moves it to its device once, when it is built. A name containing `.arpa` is read as an
    ARPA file (plain or gzip): token-level as it is, word-level (`decoding.lm_level`, or told by its unigrams)
    converted to a token LM with the model's `tokenizer` and cached (`pipeline/lm/word_arpa.py`); anything else as
    the binary written by `python jobs/build_lm.py`, which is memory-mapped."""
    from decoders.ngram import NgramLm
    from pipeline.io import fetch_file, lms_dir

    if not plan.fuses_lm:
        return None
    uri = plan.config.lm_uri
    is_arpa = ".arpa" in uri.rsplit("/", 1)[-1]
    path = fetch_file(uri, sha256=plan.config.lm_sha256, cache_dir=lms_dir(cache_dir),
                      suffix=".arpa" if is_arpa else ".lm")
    if is_arpa and _arpa_level(str(path), vocab_size, plan.config.lm_level) == "word":
        from pipeline.lm import load_word_arpa, model_speller

        if tokenizer is None:
            raise ValueError(f"{uri} is a word-level ARPA: converting it needs the model's tokenizer")
        lm = load_word_arpa(path, model_speller(tokenizer), vocab_size, cache_dir)
    else:
        lm = NgramLm.from_arpa(path, vocab_size) if is_arpa else NgramLm.load(path)
    if lm.vocab_size != vocab_size:
        raise ValueError(f"{uri}: the LM covers {lm.vocab_size} labels but the model has {vocab_size} "
                         "(build it with this model's tokenizer)")
    return lm


def _arpa_level(path: str, vocab_size: int, level: str) -> str:
    """`decoding.lm_level` resolved for the ARPA file at `path`: "token" or "word"."""
    from decoders.ngram import arpa_level

    return level if level != "auto" else arpa_level(path, vocab_size)


def lm_problem(path: str, vocab_size: int | None, level: str = "auto") -> str | None:
    """Why the LM file at a local `path` cannot serve a head of `vocab_size` labels (None: it can; vocab_size
    None: not checked), read cheaply before any actor starts: the binary's header, or an ARPA file's unigrams
    (a word-level ARPA, as `level` says or its unigrams tell, is converted with the model's tokenizer: only its
    header and unigrams are checked here)."""
    from decoders.ngram import ArpaFormatError, ArpaNgram, NgramFileError, iter_arpa, load_tensors

    if ".arpa" in path.rsplit("/", 1)[-1]:
        try:
            if _arpa_level(path, vocab_size or 1 << 30, level) == "word":
                return None
        except (ArpaFormatError, UnicodeDecodeError, OSError) as error:
            return str(error)
        covered = 0
        try:
            for item in iter_arpa(path):
                if isinstance(item, ArpaNgram):
                    if item.order > 1:
                        break  # every unigram seen
                    covered = max([covered, *(t + 1 for t in item.tokens)])
        except (ArpaFormatError, ValueError, UnicodeDecodeError, OSError) as error:
            return str(error)
    else:
        try:
            covered = load_tensors(path, verify=False)[0].vocab_size
        except (NgramFileError, OSError, ValueError) as error:
            return str(error)
    if vocab_size is not None and covered > vocab_size:
        return (f"{path}: the LM has labels up to {covered - 1} but the model's head has {vocab_size} "
                "(build it with this model's tokenizer: python jobs/build_lm.py --tokenizer MODEL.nemo)")
    return None


# --- phrase boosting: the phrase list, tokenized with the model's tokenizer -----------------------------------
class PhraseTokenizer:
    """A phrase -> its token spellings (`decoders.boosting.tree.phrase_token_sequences`) with a SentencePiece
    processor: normalised as the tokenizer's training text was (`pipeline.lm.text.TextNormaliser`: case, numbers
    spelled out, punctuation it lacks), each word with its word-start piece, and as the lone word-start piece
    followed by the word's inner pieces (encoded without SentencePiece's dummy prefix). For a cased tokenizer, a
    phrase written in lower case is also spelled in the casings the model writes it in
    (`decoders.boosting.phrase_list.phrase_casings`: "paris" as "Paris" too), each where the tokenizer can
    write it without `<unk>`; the phrase as written must be writable."""

    def __init__(self, processor: Any) -> None:
        import sentencepiece
        from sentencepiece import sentencepiece_model_pb2

        from pipeline.lm import TextNormaliser

        self.processor = processor
        self.vocab_size = int(processor.get_piece_size())
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(processor.serialized_model_proto())
        proto.normalizer_spec.add_dummy_prefix = False
        self.inner = sentencepiece.SentencePieceProcessor(model_proto=proto.SerializeToString())
        self.normalise = TextNormaliser(processor.id_to_piece(i) for i in range(self.vocab_size))
        word_start = processor.piece_to_id(WORD_START)
        self.word_start_id = None if word_start == processor.unk_id() else word_start
        self.unk_id = processor.unk_id()

    def __call__(self, text: str, where: str = "phrase") -> list[list[int]]:
        from decoders.boosting import PhraseListError, phrase_casings

        normalised = self.normalise(text)
        if not normalised:
            raise PhraseListError(f"{where}: {text!r} holds nothing the model's tokenizer writes")
        if not self.normalise.encodable(normalised):
            missing = sorted({c for c in normalised if c != " " and c not in self.normalise.alphabet})
            raise PhraseListError(f"{where}: {text!r} holds characters the model's tokenizer cannot encode: "
                                  f"{''.join(missing)!r}")
        spellings = self.spell(normalised)
        if any(self.unk_id in spelling for spelling in spellings):
            raise PhraseListError(f"{where}: {text!r} is encoded with the unknown token")
        if self.normalise.cased:
            for casing in phrase_casings(normalised)[1:]:
                if self.normalise.encodable(casing):
                    spelled = self.spell(casing)
                    if not any(self.unk_id in spelling for spelling in spelled):
                        spellings += [spelling for spelling in spelled if spelling not in spellings]
        return spellings

    def spell(self, normalised: str) -> list[list[int]]:
        """The token spellings of a phrase already normalised (`phrase_token_sequences`)."""
        from decoders.boosting import phrase_token_sequences

        return phrase_token_sequences(normalised.split(), self.processor.encode, self.inner.encode,
                                      self.word_start_id)


def phrase_spellings(processor: Any, text: str) -> list[list[int]]:
    """One phrase's token spellings with a SentencePiece processor (see `PhraseTokenizer`)."""
    return PhraseTokenizer(processor)(text)


def sentencepiece_of(model: AsrModel | ModelLayout) -> Any:
    """The SentencePiece processor of a loaded model (NeMo's tokenizer) or of a `ModelLayout`."""
    tokenizer = model.tokenizer
    processor = getattr(tokenizer, "processor", None) or getattr(getattr(tokenizer, "tokenizer", None),
                                                                 "tokenizer", None)
    if processor is None or not hasattr(processor, "serialized_model_proto"):
        raise ValueError("phrase boosting needs a model with a SentencePiece tokenizer (NeMo's bpe type)")
    return processor


def boosting_from_phrase_file(path: str, processor: Any, vocab_size: int, name: str | None = None):
    """A phrase list file -> `PhraseBoosting` over the model's labels; `PhraseListError` names the file and line
    of an empty phrase, a malformed weight, or a phrase the tokenizer cannot encode."""
    from decoders.boosting import PhraseBoosting, read_phrase_list

    tokenize = PhraseTokenizer(processor)
    if tokenize.vocab_size != vocab_size:
        raise ValueError(f"the tokenizer has {tokenize.vocab_size} pieces but the head {vocab_size} labels")
    sequences, weights = [], []
    phrases = read_phrase_list(path, name)
    for phrase in phrases:
        for spelling in tokenize(phrase.text, phrase.where):
            sequences.append(spelling)
            weights.append(phrase.weight)
    return PhraseBoosting.from_token_sequences(sequences, vocab_size, weights, num_phrases=len(phrases))


def load_boosting_model(plan: DecodingPlan, model: AsrModel | ModelLayout, cache_dir: str):
    """The plan's boosting tree (None when it boosts nothing): the phrase list fetched once per node through the
    cache and tokenized with the model's tokenizer, once per actor."""
    from pipeline.io import fetch_file, phrases_dir

    if not plan.boosts:
        return None
    uri = plan.config.phrases_uri
    path = fetch_file(uri, cache_dir=phrases_dir(cache_dir), suffix=".txt")
    return boosting_from_phrase_file(str(path), sentencepiece_of(model), plan.lm_vocab_size(model), name=uri)


def load_fusion_parts(plan: DecodingPlan, model: AsrModel | ModelLayout, cache_dir: str
                      ) -> tuple[NgramLm | None, Any]:
    """The plan's n-gram LM and the job's boosting tree (each None where the plan has none), apart: a stage that
    also boosts rows' own phrases (`pipeline/decoding/row_phrases.py`) fuses them with each batch's trees."""
    lm = load_language_model(plan, plan.lm_vocab_size(model), cache_dir, tokenizer=model.tokenizer)
    return lm, load_boosting_model(plan, model, cache_dir)


def load_fusion_model(plan: DecodingPlan, model: AsrModel | ModelLayout, cache_dir: str) -> LanguageModel | None:
    """What the plan's decoder fuses (`DecodingPlan.fusion_model`): its n-gram LM, its boosting tree, or both."""
    return plan.fusion_model(*load_fusion_parts(plan, model, cache_dir))


__all__ = ["PhraseTokenizer", "boosting_from_phrase_file", "lm_problem", "load_boosting_model", "load_fusion_model",
           "load_fusion_parts", "load_language_model", "phrase_spellings", "sentencepiece_of"]
