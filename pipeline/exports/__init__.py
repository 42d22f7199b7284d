"""Transcripts in the formats people use, from a finished output: subtitle cues cut from word timestamps (`cues`),
the output's rows grouped into recordings with unique names (`transcripts`), one function per format (`formats`:
SRT, WebVTT, text, a NeMo manifest with `pred_text`, CTM) and the export of a whole output to a folder or URI
(`export`). docs/exports.md says what each file holds.

The names below are this package's public face, imported lazily (`decoders/exports.py`)."""

from decoders.exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "cues": ("Cue", "CueRules", "TimedWord", "split_cues"),
    "export": ("ExportConfig", "ExportReport", "default_destination", "export_lines", "export_output",
               "export_warnings"),
    "formats": ("FORMATS",),
    "transcripts": ("ExportError", "read_transcripts"),
})
