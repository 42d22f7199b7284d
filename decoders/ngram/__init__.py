"""Token-level n-gram LMs: ARPA reading (`arpa`), the LM as tensors with the torch `advance` (`tensors`),
compiling ARPA n-grams to tensors (`compile`), the memory-mapped binary file (`binary`), the runtime LM
`NgramLm` (`lm`), the Triton kernel (`triton`), and building LMs from text (`build`)."""

from decoders.ngram.lm import NgramLm
from decoders.ngram.tensors import NgramTensors

__all__ = ["NgramLm", "NgramTensors"]
