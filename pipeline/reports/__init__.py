"""What the jobs write for people: Markdown reports and PNG plots (`plots`, `lm_bias`, `pseudo_label`), WER and CER
normalised and as written (`scoring`), and what in a finished job's summary a user should look at (`summary`).

The names below are this package's public face, imported lazily (`decoders/exports.py`)."""

from decoders.exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "lm_bias": ("plot_dev_wer", "plot_dev_wer_boost", "setting_text"),
    "pseudo_label": ("build_report", "curve", "plot", "reason_kind"),
    "scoring": ("NORMALISED", "WRITTEN", "ErrorRates", "error_rates", "rates_text"),
    "summary": ("findings",),
})
