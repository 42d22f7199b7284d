"""What the transducer decoders share besides the model protocol: the checks every entry point makes on its inputs
(and, for the searches that fuse an LM and replay CUDA graphs, the rest of their call's opening), the capture of
CUDA graphs of a loop's pieces, and the way out when CUDA graphs fail (`CudaGraphFallback`).

CUDA graphs fail in the field where eager CUDA works: NeMo's users report capture or replay errors with some
driver, CUDA and PyTorch pairings (drivers below 12.3, A100 with CUDA 12.8 and PyTorch 2.9), on ROCm and under high
concurrency. A decoder asked for graphs therefore decodes with them behind a `CudaGraphFallback`: the first
capture or replay that raises is reported once, as a `RuntimeWarning` naming the decoder and the error, turns
graphs off for that decoder, and the call is decoded again eagerly from its inputs (a graph path never writes
into its caller's tensors), so the transcripts are the eager decoder's. A CUDA out-of-memory error is not a graph
failure: it is raised as it is, for the caller's own handling (smaller batches).

The fallback runs on the CPU too: a test makes a decoder take its graph path on the CPU (`replays_cuda_graphs`
patched to ignore the device) and makes `capture_cuda_graphs` raise, or hand back pieces whose replay raises
(tests/decoders/transducer/test_cuda_graph_fallback.py).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

from decoders.fusion import check_lm_device
from decoders.protocols import LanguageModel


def check_encoder_inputs(encoder_output: Tensor, encoder_lengths: Tensor) -> None:
    """The checks every decoder entry point makes, with messages that name the tensor."""
    if encoder_output.dim() != 3:
        raise ValueError(f"encoder_output must be [B, T, D], got {tuple(encoder_output.shape)}")
    if encoder_lengths.dim() != 1 or encoder_lengths.shape[0] != encoder_output.shape[0]:
        raise ValueError(
            f"encoder_lengths must be [B] with B={encoder_output.shape[0]}, got {tuple(encoder_lengths.shape)}"
        )
    if encoder_lengths.dtype.is_floating_point or encoder_lengths.dtype == torch.bool:
        raise ValueError(f"encoder_lengths must hold integers, got {encoder_lengths.dtype}")
    if encoder_lengths.numel() > 0:
        low, high = int(encoder_lengths.min()), int(encoder_lengths.max())
        if low < 0 or high > encoder_output.shape[1]:
            raise ValueError(
                f"encoder_lengths must lie in [0, T={encoder_output.shape[1]}], got values in [{low}, {high}]"
            )


def checked_inputs(encoder_output: Tensor, encoder_lengths: Tensor, lm: LanguageModel | None) -> Tensor:
    """The opening of a fusing search's call: the inputs checked (`check_encoder_inputs`), the LM it fuses (if any)
    on the inputs' device (`check_lm_device`) -> encoder_lengths [B] as long integers on that device."""
    check_encoder_inputs(encoder_output, encoder_lengths)
    if lm is not None:
        check_lm_device(lm, encoder_output.device, "encoder_output")
    return encoder_lengths.to(device=encoder_output.device, dtype=torch.long)


def replays_cuda_graphs(use_cuda_graphs: bool, encoder_output: Tensor) -> bool:
    """Whether a search replays CUDA graphs for this input: asked to, on a GPU, with at least one utterance."""
    return use_cuda_graphs and encoder_output.is_cuda and encoder_output.shape[0] > 0


def capture_cuda_graphs(pieces: dict[str, Callable[[], None]],
                        device: torch.device) -> dict[str, torch.cuda.CUDAGraph]:
    """name -> CUDA graph of each piece (a function on preallocated tensors), captured on a side stream after
    one warm-up run of every piece outside capture (kernels and the caching allocator must be ready)."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for piece in pieces.values():
            piece()
    torch.cuda.current_stream(device).wait_stream(stream)
    graphs = {}
    for name, piece in pieces.items():
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            piece()
        graphs[name] = graph
    return graphs


Result = TypeVar("Result")


class CudaGraphFallback:
    """One decoder's CUDA graphs and their way out (see the module docstring): `run(graphs, eager)` returns
    `graphs()` while graphs work, and after the first failure (`error`) `eager()`, with one `RuntimeWarning`."""

    def __init__(self, decoder_name: str) -> None:
        self.decoder_name = decoder_name
        self.error: Exception | None = None  # the capture or replay failure that turned graphs off

    @property
    def graphs_on(self) -> bool:
        return self.error is None

    def run(self, graphs: Callable[[], Result], eager: Callable[[], Result]) -> Result:
        if self.error is not None:
            return eager()
        try:
            return graphs()
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as error:  # noqa: BLE001  (whatever the capture or a replay raised: decode eagerly)
            self.error = error
            warnings.warn(f"{self.decoder_name}: CUDA graphs failed ({type(error).__name__}: {error}); this decoder "
                          "decodes eagerly from now on, with the same results", RuntimeWarning, stacklevel=3)
        return eager()


__all__ = ["CudaGraphFallback", "capture_cuda_graphs", "check_encoder_inputs", "checked_inputs",
           "replays_cuda_graphs"]
