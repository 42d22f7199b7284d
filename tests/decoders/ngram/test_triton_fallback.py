"""A Triton `advance` that fails to compile or launch falls back to its torch twin (`dispatch_advance`,
decoders/ngram/tensors.py): one warning, the same scores, and the kernel is not tried again in the process.

Two real failures, both on the CPU: the kernel compiled under `TRITON_INTERPRET=1` with a block of labels that is
not a power of two (`tl.arange` refuses it, as Triton's compiler does), in a subprocess, since the variable must be
set before Triton loads; and the kernel launched on CPU tensors without the interpreter (Triton finds no driver,
as on a machine whose GPU or driver it does not support), in this process, with the failure's memory reset around
the test.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import decoders.ngram.tensors as tensors
from decoders.ngram.arpa import write_arpa
from decoders.ngram.lm import NgramLm
from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy
from decoders.transducer.tiny import TinyTransducer, calibrate_blank_bias
from tests.decoders.ngram.arpa_factory import random_ngrams

pytest.importorskip("triton")
REPOSITORY = Path(__file__).resolve().parents[3]
VOCAB_SIZE = 30


@pytest.fixture
def arpa(tmp_path) -> Path:
    path = tmp_path / "lm.arpa"
    write_arpa(path, random_ngrams(random.Random(0), 4, VOCAB_SIZE, ngrams_per_order=60, drop_prefixes=0.3))
    return path


@pytest.fixture
def fresh_process_memory(monkeypatch):
    """No Triton failure remembered before the test, and none left behind after it."""
    monkeypatch.setattr(tensors, "_triton_failure", [])
    return tensors


def test_a_kernel_that_cannot_compile_falls_back_to_torch_under_the_interpreter(arpa):
    script = f"""
import os, warnings
os.environ["TRITON_INTERPRET"] = "1"
import torch
import decoders.ngram.triton as kernel
from decoders.ngram.lm import NgramLm
from decoders.ngram.tensors import advance_torch, triton_failure

lm = NgramLm.from_arpa({str(arpa)!r}, {VOCAB_SIZE}, use_triton=True)
states = torch.randint(0, lm.tensors.num_states, (6,), generator=torch.Generator().manual_seed(0))
expected = advance_torch(lm.tensors, states)
launches = []
launch = kernel.advance_triton
def counted(*args):
    launches.append(1)
    return launch(*args)
kernel.advance_triton = counted
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    good = lm.advance(states)  # the kernel as it is: it runs (interpreted) and nothing is said
    assert not caught and triton_failure() is None and len(launches) == 1, (caught, triton_failure())
    assert torch.equal(good[1], expected[1]) and torch.allclose(good[0], expected[0], atol=1e-6, rtol=0)
    kernel.BLOCK_LABELS = 100  # not a power of two: tl.arange refuses it, a compile error
    for _ in range(3):
        scores, next_states = lm.advance(states)
        assert torch.equal(scores, expected[0]) and torch.equal(next_states, expected[1])
messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
assert len(messages) == 1, messages
assert "Triton n-gram kernel failed" in messages[0] and "power of 2" in messages[0], messages[0]
assert triton_failure() is not None and "power of 2" in triton_failure()
assert len(launches) == 2, launches  # tried once more, then never again
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPOSITORY, capture_output=True, text=True,
                            timeout=600, env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPOSITORY)})
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="the interpreter would run the kernel")
def test_a_kernel_that_cannot_launch_falls_back_to_torch(arpa, fresh_process_memory):
    lm = NgramLm.from_arpa(arpa, VOCAB_SIZE, use_triton=True)
    states = torch.randint(0, lm.tensors.num_states, (5,), generator=torch.Generator().manual_seed(1))
    expected = tensors.advance_torch(lm.tensors, states)
    with pytest.warns(RuntimeWarning, match="Triton n-gram kernel failed") as caught:
        first = lm.advance(states)
        second = lm.advance(states)
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1
    for scores, next_states in (first, second):
        assert torch.equal(scores, expected[0]) and torch.equal(next_states, expected[1])
    assert "RuntimeError" in tensors.triton_failure()
    assert not tensors.runs_triton(states, use_triton=True)  # off for the process, whatever an LM asks


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="the interpreter would run the kernel")
def test_a_decoder_fusing_the_lm_gives_the_same_tokens_when_triton_fails(arpa, fresh_process_memory):
    model = TinyTransducer(vocab_size=VOCAB_SIZE, encoder_dim=16, prediction_dim=16, joint_dim=16, seed=2)
    calibrate_blank_bias(model, frames_per_label=2.5)
    generator = torch.Generator().manual_seed(3)
    encoder_output = torch.randn(4, 40, 16, generator=generator)
    lengths = torch.tensor([40, 31, 17, 0])
    config = GreedyConfig(lm_weight=0.5, use_cuda_graphs=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch_lm = LabelLoopingGreedy(model, config, lm=NgramLm.from_arpa(arpa, VOCAB_SIZE, use_triton=False))
        expected = torch_lm(encoder_output, lengths).to_list()
    fused = LabelLoopingGreedy(model, config, lm=NgramLm.from_arpa(arpa, VOCAB_SIZE, use_triton=True))
    with pytest.warns(RuntimeWarning, match="Triton n-gram kernel failed"):
        got = fused(encoder_output, lengths).to_list()
    assert [(h.tokens, h.frame_indices, round(h.score, 5)) for h in got] == \
        [(h.tokens, h.frame_indices, round(h.score, 5)) for h in expected]
    assert sum(len(h.tokens) for h in got) > 0
