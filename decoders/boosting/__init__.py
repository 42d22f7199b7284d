"""Phrase boosting: the phrase-list format (`phrase_list`, light: no torch), NeMo's GPU boosting tree as a
`LanguageModel` (`tree`), and per-row trees in one automaton (`rows`).

The names below are this package's public face, imported lazily (`decoders/exports.py`)."""

from decoders.exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "phrase_list": ("PhraseListError", "phrase_casings", "split_phrase"),
    "rows": ("RowPhraseBoosting",),
    "tree": ("PhraseBoosting", "WeightedSum", "phrase_token_sequences", "read_phrase_list"),
})
