"""CTC prefix beam search compiled for the CPU with numba: `CtcBeamSearch`'s search, one utterance per thread.

`CpuCtcBeamSearch` runs exactly the search of `decoders.ctc.beam.CtcBeamSearch` (read its module docstring: the
prefix probabilities, the merge of a parent's extension into a prefix already in the beam, the frames a merged
prefix keeps, label selection, beam threshold, end of sentence, n-best): same `CtcBeamConfig`, same
`BatchedHypotheses`, the same n-best labels, frames and scores (up to float rounding; exact score ties may be
ordered differently). The torch search stays for GPUs; this one is what CPU actors run.

What differs is how it gets there, per utterance in compiled loops instead of [B, K, M] tensors:
- blank collapse (`decoders.ctc.greedy.collapse_blanks`' rule) runs in front, inside the kernel: the search walks a
  list of kept frames of the original emissions, so nothing is copied;
- the n-gram LM is read from `NgramLm`'s arrays (`decoders/ngram/tensors.py`), no torch per step: an
  extension's LM score is `walk_torch`'s back-off walk for that one label (float32 sums, as there), or, for a
  prefix that scores more than a few labels on a frame, a read from its state's row over the whole vocabulary
  (the same float32 values, built in about V + the arcs on its back-off chain and kept in a small cache);
- the K best of the K + K*M candidates are found without scoring all of them. First every prefix's extension
  by the frame's best label is scored, which usually sets the bar; then each prefix tries only the labels whose
  upper bound reaches the K-th best candidate found so far (and the beam threshold): its total mass + the
  label's log-probability + its prefix score + `lm_weight` times an upper bound of any LM score from its state
  (the best arc of each state on its back-off chain plus the back-off weights passed; no bound for a negative
  weight). The bound only skips candidates that could not have been kept, so the result is the exhaustive
  one. Labels are visited in score order only where a cut to M labels needs the order (sorting them cost more
  than it saved on the bundled model's emissions);
- the utterances of a batch run in parallel threads: a thread pool of `cpu_threads` threads (None: torch's
  thread count, which Ray sets to an actor's `num_cpus`) each calls the kernel, which releases the GIL, on
  its share of the utterances (longest first, dealt out in turn). A pool rather than `numba.prange`: a
  `parallel=True` kernel took several times as long to compile (docs/benchmarks.md, "The compiled CPU CTC beam
  search").

Emissions are read as float32 (what the ASR stage hands on; other dtypes are converted, so there is one
compiled kernel) and all sums are float64 (LM scores are float32 as stored, then widened): on emissions
that float32 holds exactly, the scores are the float64 torch search's to about 1e-12 (without an LM the torch
search adds the insertion bonus to prefix scores as a float32 number, about 1e-8 off per label). Scores come
back in the input's dtype. The first call of a process compiles the kernel, or loads it from numba's cache
(`cache=True`: `__pycache__` beside this file, else numba's user cache directory), which is much faster (both
measured in docs/benchmarks.md); `warm_up()` pays that at start-up.

The compiled kernel is `decoders/ctc/beam_kernel.py`; this module is its host side (arrays in, threads, results
out).

Dims: B batch, T frames, T' frames after collapse, V labels with blank, K beam, N n-best, U labels.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

from decoders.ctc.beam import CtcBeamConfig
from decoders.ctc.beam_kernel import COLLAPSE_NONE, COLLAPSE_THRESHOLD, COLLAPSE_WEAK, search_batch
from decoders.ctc.greedy import check_ctc_inputs
from decoders.fusion import check_lm_vocab_size, lm_for_fusion
from decoders.hypotheses import BatchedHypotheses
from decoders.ngram import NgramTensors
from decoders.protocols import LanguageModel


class CpuCtcBeamSearch:
    """`CtcBeamSearch` (see `decoders.ctc.beam`) compiled for the CPU, parallel over utterances (module docstring).

    The fused LM must be an `NgramLm` (anything with `tensors: NgramTensors`); use `CtcBeamSearch` for others.
    """

    def __init__(
        self,
        blank_id: int,
        config: CtcBeamConfig = CtcBeamConfig(),  # noqa: B008 (frozen, as CtcBeamSearch takes it)
        lm: LanguageModel | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        """`device`: only "cpu" (or None) is accepted; the LM is moved to the CPU once, here."""
        if blank_id < 0:
            raise ValueError(f"blank_id must be >= 0, got {blank_id}")
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"CpuCtcBeamSearch runs on the CPU, got device={str(device)!r}; use CtcBeamSearch")
        self.blank_id = blank_id
        self.config = config
        self.lm = lm_for_fusion(lm, config.lm_weight, None, "cpu")
        self._lm_arrays = _no_lm_arrays()
        self._executor: ThreadPoolExecutor | None = None
        self._executor_threads = 0
        self._pool_lock = threading.Lock()
        if self.lm is not None:
            tensors = getattr(self.lm, "tensors", None)
            if not isinstance(tensors, NgramTensors):
                raise TypeError(
                    f"CpuCtcBeamSearch reads an NgramLm's arrays; got {type(self.lm).__name__}, use CtcBeamSearch"
                )
            self._lm_arrays = _lm_arrays(tensors)

    def warm_up(self) -> None:
        """Compile (or load from numba's cache) the kernel for float32 input: a Ray actor calls this at start."""
        num_labels = self.lm.vocab_size + 1 if self.lm is not None else max(self.blank_id + 1, 2)
        log_probs = torch.full((1, 2, num_labels), -math.log(num_labels), dtype=torch.float32)
        self(log_probs, torch.tensor([2]))

    @torch.no_grad()
    def __call__(self, log_probs: Tensor, lengths: Tensor, nbest: int = 1) -> BatchedHypotheses:
        """log_probs [B, T, V] (log-softmax output, on the CPU), lengths [B] -> hypotheses, as `CtcBeamSearch`:
        B rows with nbest = 1, else B * N rows (row b * N + i is utterance b's i-th best; rows past the
        hypotheses found are empty with score -inf); frames are original frames."""
        check_ctc_inputs(log_probs, lengths, self.blank_id)
        if not 1 <= nbest <= self.config.beam_size:
            raise ValueError(f"nbest must lie in [1, beam_size={self.config.beam_size}], got {nbest}")
        if log_probs.device.type != "cpu":
            raise ValueError(f"log_probs must be on the CPU for CpuCtcBeamSearch, got {log_probs.device}")
        config, blank_id = self.config, self.blank_id
        batch_size, max_time, num_labels = log_probs.shape
        use_lm = self.lm is not None and num_labels > 1
        if self.lm is not None:
            check_lm_vocab_size(self.lm, num_labels - 1)
        out_dtype = log_probs.dtype
        log_probs = log_probs.float()  # one compiled kernel: float32 emissions, float64 sums
        emissions = log_probs.detach().contiguous().numpy()
        lengths_array = lengths.detach().to("cpu", torch.long).contiguous().numpy()

        labels_per_frame = num_labels - 1
        if config.max_labels_per_frame is not None:
            labels_per_frame = min(labels_per_frame, config.max_labels_per_frame)
        if not use_lm:
            labels_per_frame = min(labels_per_frame, config.beam_size + 1)
        threshold = config.collapse_threshold
        mode = COLLAPSE_NONE if threshold is None else COLLAPSE_WEAK if threshold == "weak" else COLLAPSE_THRESHOLD
        # compared in float32, as collapse_blanks compares a float32 tensor with a Python float
        log_threshold = np.array(
            [math.log(float(threshold)) if mode == COLLAPSE_THRESHOLD else 0.0], dtype=emissions.dtype
        )
        lm_weight = float(config.lm_weight) if use_lm else 0.0
        # each utterance's first LM state: the LM's start, or a row's own where the model is bound to rows
        # (per-utterance phrase boosting, decoders/boosting/rows.py)
        initial_states = (np.ascontiguousarray(self.lm.initial_states(batch_size).cpu().numpy(), dtype=np.int64)
                          if use_lm else np.zeros(batch_size, dtype=np.int64))

        capacity = max(max_time, 1)
        tokens = np.zeros((batch_size, nbest, capacity), dtype=np.int64)
        frames = np.zeros((batch_size, nbest, capacity), dtype=np.int64)
        token_scores = np.zeros((batch_size, nbest, capacity), dtype=np.float64)
        token_lengths = np.zeros((batch_size, nbest), dtype=np.int64)
        scores = np.full((batch_size, nbest), -np.inf, dtype=np.float64)
        def search(utterances: np.ndarray) -> None:
            search_batch(
                utterances, emissions, lengths_array, blank_id, config.beam_size, nbest, labels_per_frame,
                float(config.token_min_log_prob), lm_weight, float(config.insertion_bonus),
                float(config.beam_threshold), bool(use_lm and config.lm_end_of_sentence), mode, log_threshold,
                use_lm, initial_states, *self._lm_arrays,
                tokens, frames, token_scores, token_lengths, scores,
            )  # fmt: skip

        threads = min(config.cpu_threads or torch.get_num_threads(), batch_size)
        if threads <= 1:
            search(np.arange(batch_size))
        else:  # each thread writes only its own utterances' rows
            shares = _deal(lengths_array, threads)
            list(self._pool(threads).map(search, shares))
        return _to_hypotheses(tokens, frames, token_scores, token_lengths, scores, out_dtype)

    def _pool(self, threads: int) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._executor is None or self._executor_threads != threads:
                if self._executor is not None:
                    self._executor.shutdown(wait=False)
                self._executor = ThreadPoolExecutor(threads, thread_name_prefix="ctc-beam-cpu")
                self._executor_threads = threads
            return self._executor


def _deal(lengths: np.ndarray, threads: int) -> list[np.ndarray]:
    """Utterance indices in `threads` shares of about equal work: longest first, dealt out in turn."""
    order = np.argsort(-lengths, kind="stable")
    return [np.ascontiguousarray(order[share::threads]) for share in range(threads)]


def _to_hypotheses(tokens: np.ndarray, frames: np.ndarray, token_scores: np.ndarray, token_lengths: np.ndarray,
                   scores: np.ndarray, dtype: torch.dtype) -> BatchedHypotheses:
    batch_size, nbest, _ = tokens.shape
    rows = batch_size * nbest
    capacity = int(token_lengths.max()) if token_lengths.size > 0 else 0
    hypotheses = BatchedHypotheses(rows, capacity, "cpu", dtype)
    hypotheses.token_lengths.copy_(torch.from_numpy(token_lengths.reshape(rows)))
    hypotheses.scores.copy_(torch.from_numpy(scores.reshape(rows)))
    if capacity > 0:
        hypotheses.tokens.copy_(torch.from_numpy(tokens[:, :, :capacity].reshape(rows, capacity)))
        hypotheses.frame_indices.copy_(torch.from_numpy(frames[:, :, :capacity].reshape(rows, capacity)))
        hypotheses.token_scores.copy_(torch.from_numpy(token_scores[:, :, :capacity].reshape(rows, capacity)))
    return hypotheses


def _no_lm_arrays() -> tuple[np.ndarray, ...]:
    """Placeholders with the LM arrays' dtypes: one compiled kernel serves searches with and without an LM."""
    return (np.zeros(2, np.int64), np.zeros(1, np.int64), np.zeros(1, np.float32), np.zeros(1, np.int32),
            np.zeros(1, np.int64), np.zeros(1, np.float32), np.zeros(1, np.float32), np.zeros(1, np.float64), 1)


def _lm_arrays(lm: NgramTensors) -> tuple[np.ndarray, ...]:
    """The LM's arrays as numpy views (no copies for an LM read or memory-mapped on the CPU), plus each state's
    best arc weight (-inf for a state without arcs), which bounds the LM scores reachable from a state."""

    def array(tensor: Tensor, dtype) -> np.ndarray:
        return np.ascontiguousarray(tensor.detach().cpu().numpy(), dtype=dtype)

    offsets = array(lm.arc_offsets, np.int64)
    weights = array(lm.arc_weights, np.float32)
    counts = np.diff(offsets)
    best_arc = np.full(len(counts), -np.inf, dtype=np.float64)
    has_arcs = counts > 0
    if weights.size > 0 and has_arcs.any():
        best_arc[has_arcs] = np.maximum.reduceat(weights.astype(np.float64), offsets[:-1][has_arcs])
    return (offsets, array(lm.arc_keys, np.int64), weights, array(lm.arc_targets, np.int32),
            array(lm.backoff_targets, np.int64), array(lm.backoff_weights, np.float32),
            array(lm.final_weights, np.float32), best_arc, int(lm.vocab_size))


__all__ = ["CpuCtcBeamSearch"]
