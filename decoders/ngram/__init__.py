"""Token-level n-gram LMs: ARPA reading (`arpa`), tensors and batched queries (`lm`), the Triton kernel
(`triton`), and building LMs from text (`build`)."""

from decoders.ngram.lm import NgramLm, NgramTensors

__all__ = ["NgramLm", "NgramTensors"]
