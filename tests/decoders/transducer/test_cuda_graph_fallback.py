"""CUDA graphs failing fall back to the eager decoder (`CudaGraphFallback`, decoders/transducer/shared.py).

The fallback runs on the CPU: each decoder is made to take its CUDA-graph path on the CPU (`replays_cuda_graphs`
patched to ignore the device), and `capture_cuda_graphs` is replaced by one that raises (a capture failure) or
that hands back the pieces themselves as "graphs" whose replay raises after a few replays (a replay failure, in the
middle of a search). Each decoder must then warn once, give the eager decoder's results on that call and every
later one, and never try graphs again. With graphs that work (the pieces replayed as they are) there is no warning
and the same results, which shows the patched path is the graph path and not the eager one.
"""

from __future__ import annotations

import functools
import warnings
from types import SimpleNamespace

import pytest
import torch

import decoders.transducer.beam_base as beam_base
import decoders.transducer.greedy as greedy
from decoders.transducer.aes import AesSkipBlankSearch
from decoders.transducer.beam import AesBeamSearch, AlsdBeamSearch, BeamSearchConfig
from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy
from decoders.transducer.tiny import TinyTransducer, calibrate_blank_bias
from decoders.transducer.wind_beam import WindBeamSearch
from tests.reference.fake_lm import BigramLm

VOCAB_SIZE = 7
ENCODER_DIM = 8
DURATIONS = {"rnnt": (), "tdt": (0, 1, 2, 3, 4)}
GRAPH_MODULES = (greedy, beam_base)  # every module that captures graphs (grep capture_cuda_graphs)


@functools.cache
def tiny_model(kind: str) -> TinyTransducer:
    """Built before any patch: its calibration decodes with a default (graph-asking) greedy decoder."""
    model = TinyTransducer(vocab_size=VOCAB_SIZE, encoder_dim=ENCODER_DIM, prediction_dim=8, joint_dim=8,
                           durations=DURATIONS[kind], seed=5)
    calibrate_blank_bias(model, frames_per_label=2.5)
    return model.double()


def inputs(batch_size: int, max_frames: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    encoder_output = torch.randn(batch_size, max_frames, ENCODER_DIM, generator=generator, dtype=torch.double)
    lengths = torch.randint(0, max_frames + 1, (batch_size,), generator=generator)
    lengths[0] = max_frames
    return encoder_output, lengths


def decoders(kind: str, use_cuda_graphs: bool) -> dict:
    """Every decoder that replays CUDA graphs, with an LM where it fuses one."""
    model = tiny_model(kind)
    lm = BigramLm.random(VOCAB_SIZE, seed=1)
    beam = dict(beam_size=3, use_cuda_graphs=use_cuda_graphs)
    built = {
        "greedy": LabelLoopingGreedy(model, GreedyConfig(use_cuda_graphs=use_cuda_graphs)),
        "greedy_wind_lm": LabelLoopingGreedy(model, GreedyConfig(window_size=4, lm_weight=0.5,
                                                                 use_cuda_graphs=use_cuda_graphs), lm=lm),
        "alsd_lm": AlsdBeamSearch(model, BeamSearchConfig(lm_weight=0.5, **beam), lm),
        "aes": AesBeamSearch(model, BeamSearchConfig(**beam)),
    }
    if kind == "rnnt":  # both are RNN-T only
        built["aes_skip"] = AesSkipBlankSearch(model, BeamSearchConfig(window_size=4, **beam))
        built["wind_beam_lm"] = WindBeamSearch(model, BeamSearchConfig(lm_weight=0.5, window_size=4, **beam), lm)
    return built


def as_lists(hypotheses) -> list[tuple]:
    return [(h.tokens, h.frame_indices, h.durations, round(h.score, 9)) for h in hypotheses.to_list()]


class FakeCapture:
    """`capture_cuda_graphs` on the CPU: the pieces themselves as graphs, replayed as they are; with `fail_capture`
    the capture raises, with `fail_after` the replay after that many raises (each decoder's count apart)."""

    def __init__(self, fail_capture: BaseException | None = None, fail_after: int | None = None) -> None:
        self.fail_capture = fail_capture
        self.fail_after = fail_after
        self.captures = 0
        self.replays = 0

    def __call__(self, pieces, device):
        self.captures += 1
        if self.fail_capture is not None:
            raise self.fail_capture
        return {name: SimpleNamespace(replay=self._replay(piece)) for name, piece in pieces.items()}

    def _replay(self, piece):
        def replay():
            self.replays += 1
            if self.fail_after is not None and self.replays > self.fail_after:
                raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
            piece()

        return replay


@pytest.fixture
def graph_path_on_cpu(monkeypatch):
    """Every decoder takes its CUDA-graph path on the CPU; returns a function that installs a `FakeCapture`."""
    for kind in DURATIONS:
        tiny_model(kind)
    for module in GRAPH_MODULES:
        monkeypatch.setattr(module, "replays_cuda_graphs", lambda use, output: use and output.shape[0] > 0)

    def install(capture: FakeCapture) -> FakeCapture:
        for module in GRAPH_MODULES:
            monkeypatch.setattr(module, "capture_cuda_graphs", capture)
        return capture

    return install


BATCHES = [(5, 12, 0), (3, 20, 1), (6, 9, 2)]  # (batch size, frames, seed): the second forces a recapture


def decode_all(decoder) -> list[list[tuple]]:
    return [as_lists(decoder(*inputs(*batch))) for batch in BATCHES]


@pytest.mark.parametrize("kind", sorted(DURATIONS))
def test_graphs_that_work_give_the_eager_results_without_a_warning(graph_path_on_cpu, kind):
    eager = {name: decode_all(decoder) for name, decoder in decoders(kind, use_cuda_graphs=False).items()}
    for name, decoder in decoders(kind, use_cuda_graphs=True).items():
        capture = graph_path_on_cpu(FakeCapture())
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert decode_all(decoder) == eager[name], name
        assert capture.captures >= 1 and capture.replays > 0, f"{name} did not take its graph path"
        assert decoder.graph_fallback.graphs_on, name


@pytest.mark.parametrize("kind", sorted(DURATIONS))
@pytest.mark.parametrize("failure", ["capture", "replay"])
def test_failing_graphs_fall_back_to_eager_with_one_warning(graph_path_on_cpu, kind, failure):
    eager = {name: decode_all(decoder) for name, decoder in decoders(kind, use_cuda_graphs=False).items()}
    for name, decoder in decoders(kind, use_cuda_graphs=True).items():
        capture = graph_path_on_cpu(
            FakeCapture(fail_capture=RuntimeError("CUDA error: operation failed due to a previous error during "
                                                  "capture")) if failure == "capture" else FakeCapture(fail_after=3))
        with pytest.warns(RuntimeWarning) as caught:
            got = decode_all(decoder)
        messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert len(messages) == 1, (name, messages)
        assert type(decoder).__name__ in messages[0] and "CUDA graphs failed" in messages[0]
        assert "RuntimeError: CUDA error" in messages[0]
        assert got == eager[name], name
        assert not decoder.graph_fallback.graphs_on and decoder._graphs is None
        assert capture.captures == 1, f"{name} tried graphs again after they failed"


def test_a_failed_replay_mid_search_is_decoded_again_from_the_start(graph_path_on_cpu):
    """The replay fails deep inside a search, after some labels were written: the result is still exactly the
    eager decoder's, with nothing left over from the partial graph run."""
    encoder_output, lengths = inputs(4, 30, seed=3)
    eager = LabelLoopingGreedy(tiny_model("tdt"), GreedyConfig(use_cuda_graphs=False))(encoder_output, lengths)
    decoder = LabelLoopingGreedy(tiny_model("tdt"), GreedyConfig(use_cuda_graphs=True))
    capture = graph_path_on_cpu(FakeCapture(fail_after=10))
    with pytest.warns(RuntimeWarning, match="CUDA graphs failed"):
        got = decoder(encoder_output, lengths)
    assert capture.replays > 10 and as_lists(got) == as_lists(eager)
    assert sum(len(h.tokens) for h in got.to_list()) > 0


def test_out_of_memory_is_not_a_graph_failure(graph_path_on_cpu):
    """CUDA's out-of-memory error is raised as it is (the ASR stage halves its batches on it), and graphs stay on."""
    decoder = AlsdBeamSearch(tiny_model("rnnt"), BeamSearchConfig(beam_size=2))
    graph_path_on_cpu(FakeCapture(fail_capture=torch.cuda.OutOfMemoryError("CUDA out of memory")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(torch.cuda.OutOfMemoryError):
            decoder(*inputs(2, 10, seed=4))
    assert decoder.graph_fallback.graphs_on


def test_on_the_cpu_without_patches_no_graph_is_tried(monkeypatch):
    """Unpatched, a CPU decode never reaches the capture (`replays_cuda_graphs` is false on the CPU)."""
    capture = FakeCapture(fail_capture=AssertionError("captured on the CPU"))
    for module in GRAPH_MODULES:
        monkeypatch.setattr(module, "capture_cuda_graphs", capture)
    for decoder in decoders("rnnt", use_cuda_graphs=True).values():
        decoder(*inputs(3, 8, seed=5))
        assert decoder.graph_fallback.graphs_on
    assert capture.captures == 0
