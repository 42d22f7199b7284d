"""Pseudo-labelling: which utterances to keep and the training manifests they go into (`filters`), and the nightly
run's bookkeeping (`runs`).

The names below are this package's public face, imported lazily (`decoders/exports.py`)."""

from decoders.exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "filters": ("LabelFilters", "judge"),
    "runs": ("LabelConfig", "LabelError", "label_run", "prepare_label_run", "print_line"),
})
