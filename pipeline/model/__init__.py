"""The model: what a `.nemo` says without NeMo (`nemo_file`), the checkpoint loaded with NeMo and adapted to the
decoders' protocols (`nemo`, the one module that imports NeMo), and what a stage actor loads (`actor`).

The names below are this package's public face, imported lazily (`decoders/exports.py`)."""

from decoders.exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "actor": (
        "BackgroundLoad", "ModelLoadError", "fetch_model", "load_checked_calibration", "load_layout", "load_model",
    ),
    "nemo": ("AsrModel", "NemoTransducer", "load_asr_model"),
    "nemo_file": (
        "Head", "LayoutUnavailable", "ModelFacts", "ModelLayout", "read_model_facts", "read_model_layout",
        "sentencepiece_model",
    ),
})
