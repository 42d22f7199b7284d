"""RNN-T and TDT decoding: label-looping greedy and WIND (`greedy`, its host loop `label_looping_cpu`), the
frame-looping baseline (`frame_looping`), ALSD++, AES++ and WIND beam search (`beam`, `aes`, `wind_beam`, sharing
`beam_base`), per-token confidence of any search (`confidence`), and a tiny model for tests and benchmarks (`tiny`).

The names below are this package's public face, imported lazily (`decoders/exports.py`)."""

from decoders.exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "aes": ("AesBeamSearch", "AesSkipBlankSearch"),
    "beam": ("AlsdBeamSearch", "BeamSearchConfig"),
    "confidence": ("hypothesis_confidence",),
    "frame_looping": ("FrameLoopingGreedy",),
    "greedy": ("GreedyConfig", "LabelLoopingGreedy"),
    "lstm_step": ("LstmStep",),
    "tiny": ("TinyTransducer", "calibrate_blank_bias", "emission_rate"),
    "wind_beam": ("WindBeamSearch",),
})
