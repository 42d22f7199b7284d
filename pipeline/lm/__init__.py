"""Language models for a domain: text normalised for the tokenizer (`text`), token LMs built from it (`build`), word
ARPA files converted (`word_arpa`), weights tuned on a dev set (`tuning`), and the lm_bias run (`bias`).

The names below are this package's public face, imported lazily (`decoders/exports.py`)."""

from decoders.exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "bias": ("BiasConfig", "BiasError", "prepare_bias", "print_line", "run_bias"),
    "build": (
        "MAX_ORDER", "build_lm", "find_lmplz", "format_report", "heldout_perplexity", "train_lmplz", "train_varikn",
    ),
    "text": ("TextNormaliser",),
    "tuning": (
        "EncodedSet", "Score", "TrialCache", "encode_set", "score", "setting_key", "takes_bonus", "transcribe_set",
        "tune",
    ),
    "word_arpa": ("convert_word_arpa", "load_word_arpa", "model_speller", "sentences_to_draw"),
})
