"""How a job decodes: the strategies and the plan, each decision made once (`plan`), what the decoders fuse
(`fusion`: the n-gram LM and the phrase-boosting tree), per-row phrase lists (`row_phrases`), hypotheses -> text and
word timestamps (`recognize`), and word-confidence calibration (`calibration`).

The names below are this package's public face, imported lazily (`decoders/exports.py`)."""

from decoders.exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "calibration": ("Calibration", "DEFAULT_KIND", "KINDS", "fit_calibration", "load_calibration", "measure_of"),
    "fusion": (
        "boosting_from_phrase_file", "lm_problem", "load_boosting_model", "load_fusion_parts", "sentencepiece_of",
    ),
    "plan": (
        "DecodingConfig", "DecodingError", "DecodingPlan", "STRATEGIES", "advice", "compact_ctc_log_probs",
        "decode_in_process", "describe", "plan_decoding", "results_identity", "strategies_for",
    ),
    "recognize": ("GreedyRecognizer", "head_agreement", "pad_waveforms", "transcript_of"),
    "row_phrases": ("PhraseSet", "RowPhrases", "StagePhrases", "phrase_set"),
})
