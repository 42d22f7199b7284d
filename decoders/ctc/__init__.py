"""CTC decoding: blank collapse and batched greedy (`greedy`), prefix beam search with LM fusion (`beam`), and the
same search compiled for the CPU (`beam_cpu`, its kernel `beam_kernel`).

The names below are this package's public face, imported lazily (`decoders/exports.py`)."""

from decoders.exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "beam": ("CtcBeamConfig", "CtcBeamSearch"),
    "beam_cpu": ("CpuCtcBeamSearch",),
    "greedy": ("CtcGreedy", "collapse_blanks"),
})
