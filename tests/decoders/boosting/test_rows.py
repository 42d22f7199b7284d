"""Per-utterance phrase boosting (`decoders/boosting/rows.py`): one automaton for a batch whose rows list different
phrase sets (some the same, some none).

- Each row's scores are its own set's tree's (`PhraseBoosting`), bit for bit, on the CPU's resolved arcs, the torch
  walk and the Triton kernel.
- Every decoder, given a batch, decodes each row as it decodes that row alone with its own tree, and as the slow
  per-utterance reference decoders decode it with its own `ReferenceBoosting` (tests/reference/boosting.py):
  boosting alone, with an n-gram LM, and with a job-wide tree added to the rows' own.
- An obvious answer: two rows with the same emissions, each listing another phrase, each write their own.
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoders.boosting.rows import NO_SET, RowPhraseBoosting, union_tensors
from decoders.boosting.tree import PhraseBoosting, WeightedSum
from decoders.ctc.beam import CtcBeamConfig, CtcBeamSearch
from decoders.ctc.beam_cpu import CpuCtcBeamSearch
from decoders.ctc.greedy import CtcGreedy
from decoders.ngram.tensors import walk_torch
from decoders.transducer.beam import AesBeamSearch, AesSkipBlankSearch, AlsdBeamSearch, BeamSearchConfig
from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy
from tests.decoders.ctc.test_greedy import emissions
from tests.decoders.transducer.test_beam import VOCAB_SIZE, random_inputs, tiny_model
from tests.decoders.transducer.test_greedy_fusion import VOCAB_SIZE as GREEDY_VOCAB
from tests.decoders.transducer.test_greedy_fusion import tiny_model as greedy_model
from tests.reference.boosting import ReferenceBoosting, ReferenceSum
from tests.reference.ctc import BigramLm, greedy_one, prefix_beam_search_one
from tests.reference.transducer_beam import alsd_decode, maes_decode
from tests.reference.transducer_greedy import greedy_decode


def random_sets(rng: random.Random, vocab_size: int, count: int, labels: list[int] | None = None):
    """`count` phrase sets: (token sequences, weights), over `labels` (all labels if None)."""
    labels = labels if labels is not None else list(range(vocab_size))
    sets = []
    for _ in range(count):
        sequences = [[rng.choice(labels) for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(1, 5))]
        sets.append((sequences, [rng.choice([None, None, 0.5, 2.5]) for _ in sequences]))
    return sets


class Batch:
    """A batch's phrase sets, each row's set (`NO_SET` for none), and for each row the models it is decoded with
    alone: its own tree, and its own reference."""

    def __init__(self, seed: int, vocab_size: int, batch_size: int, near: bool = True) -> None:
        rng = random.Random(seed)
        labels = rng.sample(range(vocab_size), min(4, vocab_size)) if near else None  # so decoders meet them
        self.sets = random_sets(rng, vocab_size, rng.randint(1, 3), labels)
        self.set_of_row = [rng.randint(NO_SET, len(self.sets) - 1) for _ in range(batch_size)]
        self.set_of_row[0] = 0  # at least one row with phrases
        self.trees = [PhraseBoosting.from_token_sequences(s, vocab_size, w) for s, w in self.sets]
        self.vocab_size = vocab_size
        self.rows = RowPhraseBoosting.from_sets(self.trees, self.set_of_row, vocab_size)

    def tree(self, row: int):
        """The model row `row` is decoded with alone: its set's tree (an empty one, scoring 0, for no set)."""
        index = self.set_of_row[row]
        return self.trees[index] if index != NO_SET else RowPhraseBoosting.from_sets([], [NO_SET], self.vocab_size)

    def reference(self, row: int) -> ReferenceBoosting:
        index = self.set_of_row[row]
        sequences, weights = self.sets[index] if index != NO_SET else ([], [])
        return ReferenceBoosting(sequences, self.vocab_size, weights)


def fused(boosting, lm, job, sum_of=WeightedSum):
    """What the plan fuses (pipeline/decoding/plan.py, pipeline/decoding/row_phrases.py): the job's tree plus the
    rows' (each at 1), with the LM (0.4 and 0.6 of the decoder's weight). References are summed with `ReferenceSum`."""
    if job is not None:
        boosting = sum_of(job, 1.0, boosting, 1.0)
    return boosting if lm is None else sum_of(lm, 0.4, boosting, 0.6)


def fused_reference(batch: Batch, row: int, lm, job_reference):
    return fused(batch.reference(row), lm, job_reference, ReferenceSum)


def job_models(seed: int, vocab_size: int, with_job: bool):
    """A job-wide tree and its reference, or (None, None)."""
    if not with_job:
        return None, None
    (sequences, weights), = random_sets(random.Random(seed + 1), vocab_size, 1)
    return (PhraseBoosting.from_token_sequences(sequences, vocab_size, weights),
            ReferenceBoosting(sequences, vocab_size, weights))


# --- the automaton ---------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_each_row_scores_as_its_own_sets_tree_bit_for_bit(seed):
    rng = random.Random(seed)
    vocab_size = rng.randint(1, 7)
    batch = Batch(seed, vocab_size, rng.randint(1, 5), near=False)
    rows = batch.rows
    roots = rows.initial_states(len(batch.set_of_row))
    for row, index in enumerate(batch.set_of_row):
        root = int(roots[row])
        if index == NO_SET:  # no set: every label scores 0 and stays at state 0
            assert root == 0
            scores, next_states = rows.advance(roots[row: row + 1])
            assert not scores.any() and not next_states.any() and not rows.final_scores(roots[row: row + 1]).any()
            continue
        tree = batch.trees[index]
        states = torch.arange(tree.num_states)
        scores, next_states = tree.advance(states)  # the CPU's resolved arcs
        got, got_next = rows.advance(states + root)
        assert torch.equal(got, scores) and torch.equal(got_next, next_states + root)
        labels = torch.arange(vocab_size).expand(tree.num_states, vocab_size)
        walked, walked_next = walk_torch(tree.tensors, states, labels)  # the GPU's way, and score_labels
        got, got_next = walk_torch(rows.tensors, states + root, labels)
        assert torch.equal(got, walked) and torch.equal(got_next, walked_next + root)
        got, got_next = rows.score_labels(states + root, labels)
        assert torch.equal(got, walked) and torch.equal(got_next, walked_next + root)
        assert torch.equal(rows.final_scores(states + root), tree.final_scores(states))


def test_initial_states_give_each_row_its_root_in_the_decoders_layouts():
    trees = [PhraseBoosting.from_token_sequences([[1, 2]], 4), PhraseBoosting.from_token_sequences([[3], [2, 2]], 4)]
    rows = RowPhraseBoosting.from_sets(trees, [1, NO_SET, 0, 1], 4)
    first, second = 1, 1 + trees[0].num_states
    assert rows.initial_states(4).tolist() == [second, 0, first, second]  # [B]: greedy, CTC
    assert rows.initial_states(8).tolist() == [second, second, 0, 0, first, first, second, second]  # [B, K]
    assert rows.initial_states(0).tolist() == []
    with pytest.raises(ValueError, match="bound to a batch of 4 rows"):
        rows.initial_states(6)
    with pytest.raises(ValueError, match="indices of the 2 trees"):
        RowPhraseBoosting.from_sets(trees, [2], 4)
    tensors, bases = union_tensors([tree.tensors for tree in trees], 4)
    assert bases.tolist() == [first, second] and tensors.num_states == 1 + trees[0].num_states + trees[1].num_states
    assert tensors.max_order == max(tree.tensors.max_order for tree in trees) + 1
    empty = RowPhraseBoosting.from_sets([], [NO_SET, NO_SET], 4)
    assert empty.num_states == 1 and not empty.advance(empty.initial_states(2))[0].any()


def test_triton_equals_the_sets_trees_under_interpreter():
    """Runs the n-gram kernel on the union in a subprocess with TRITON_INTERPRET=1 (set before triton loads)."""
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys

    script = """
import os, random
os.environ["TRITON_INTERPRET"] = "1"
import torch
from decoders.ngram.triton import advance_triton
from tests.decoders.boosting.test_rows import Batch
batch = Batch(7, 150, 5, near=False)
roots = batch.rows.initial_states(5)
for row, index in enumerate(batch.set_of_row):
    if index < 0:
        continue
    tree = batch.trees[index]
    states = torch.arange(tree.num_states)
    expected, expected_next = advance_triton(tree.tensors, states)
    got, got_next = advance_triton(batch.rows.tensors, states + int(roots[row]))
    assert torch.equal(got, expected) and torch.equal(got_next, expected_next + int(roots[row]))
print("ok")
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    result = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": root})
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


@pytest.mark.gpu
def test_gpu_advance_equals_cpu():
    batch = Batch(5, 50, 6, near=False)
    states = torch.arange(batch.rows.num_states)
    scores, next_states = batch.rows.advance(states)
    on_gpu = batch.rows.to("cuda")
    for use_triton in (False, None):
        on_gpu.use_triton = use_triton
        gpu_scores, gpu_next = on_gpu.advance(states.cuda())
        assert torch.equal(gpu_next.cpu(), next_states)
        assert torch.allclose(gpu_scores.cpu(), scores, atol=1e-6)


# --- every decoder: a batch decodes each row as it decodes alone, and as the references do ---------------------
DECODERS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_same(got, expected, abs_score: float = 1e-6, message: str = "") -> None:
    assert (got.tokens, got.frame_indices, got.durations) == (expected.tokens, expected.frame_indices,
                                                              expected.durations), message
    assert got.score == pytest.approx(expected.score, abs=abs_score), message


@DECODERS
@given(st.integers(0, 2**31 - 1), st.sampled_from((0.5, 2.0)), st.booleans(), st.booleans())
def test_label_looping_greedy_decodes_each_row_with_its_own_phrases(seed, weight, with_lm, with_job):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([0, 1, 17, 30, 9, 22])
    encoder_output = torch.randn(6, 30, 16, generator=generator, dtype=torch.double)
    batch = Batch(seed, GREEDY_VOCAB, 6)
    lm = BigramLm.random(GREEDY_VOCAB, seed=seed % 89) if with_lm else None
    job, job_reference = job_models(seed, GREEDY_VOCAB, with_job)
    for kind, window in (("rnnt", 1), ("tdt01234", 4)):
        model = greedy_model(kind, "realistic")
        config = GreedyConfig(max_symbols=3, window_size=window, lm_weight=weight)
        got = LabelLoopingGreedy(model, config, lm=fused(batch.rows, lm, job))(encoder_output, lengths).to_list()
        for row, hypothesis in enumerate(got):
            alone = LabelLoopingGreedy(model, config, lm=fused(batch.tree(row), lm, job))(
                encoder_output[row: row + 1], lengths[row: row + 1]).to_list()[0]
            assert_same(hypothesis, alone, message=f"{kind} row {row}")
            reference = greedy_decode(model, encoder_output[row: row + 1], lengths[row: row + 1], 3,
                                      lm=fused_reference(batch, row, lm, job_reference), lm_weight=weight)[0]
            assert_same(hypothesis, reference, 1e-4, f"{kind} row {row} against the reference")


@DECODERS
@given(st.integers(0, 2**31 - 1), st.sampled_from(("early", "late")), st.sampled_from(("none", "weighted")),
       st.booleans(), st.booleans())
def test_transducer_beam_searches_decode_each_row_with_its_own_phrases(seed, pruning, scoring, with_lm, with_job):
    encoder_output, lengths = random_inputs(5, 8, seed, [0, 1, 8, 5, 7])
    batch = Batch(seed, VOCAB_SIZE, 5)
    lm = BigramLm.random(VOCAB_SIZE, seed=seed % 97) if with_lm else None
    job, job_reference = job_models(seed, VOCAB_SIZE, with_job)
    config = BeamSearchConfig(beam_size=3, max_symbols_per_frame=3, lm_weight=1.5, pruning=pruning,
                              blank_lm_scoring=scoring, window_size=4)
    searches = [(AlsdBeamSearch, "rnnt", alsd_decode), (AlsdBeamSearch, "tdt01234", alsd_decode),
                (AesBeamSearch, "rnnt", maes_decode), (AesSkipBlankSearch, "rnnt", maes_decode)]
    for search, kind, reference_decode in searches:
        model = tiny_model(kind)
        got = search(model, config, fused(batch.rows, lm, job))(encoder_output, lengths).to_list()
        for row, hypothesis in enumerate(got):
            one = slice(row, row + 1)
            alone = search(model, config, fused(batch.tree(row), lm, job))(encoder_output[one], lengths[one])
            message = f"{search.__name__} {kind} row {row}"
            assert_same(hypothesis, alone.to_list()[0], message=message)
            expected = reference_decode(model, encoder_output[one], lengths[one], config,
                                        fused_reference(batch, row, lm, job_reference))[0][0]
            assert_same(hypothesis, expected, 1e-4, message + " against the reference")


@DECODERS
@given(st.integers(0, 2**31 - 1), st.sampled_from((0.5, 3.0)), st.booleans(), st.booleans())
def test_ctc_greedy_and_beam_searches_decode_each_row_with_its_own_phrases(seed, weight, with_lm, with_job):
    num_labels, blank_id = 6, 5
    lengths = torch.tensor([0, 1, 12, 20, 16])
    log_probs = emissions("peaky", 5, 20, num_labels, blank_id, seed)
    batch = Batch(seed, num_labels - 1, 5)
    lm = BigramLm.random(num_labels - 1, seed=seed % 83) if with_lm else None
    job, job_reference = job_models(seed, num_labels - 1, with_job)
    got = CtcGreedy(blank_id, fused(batch.rows, lm, job), weight)(log_probs, lengths).to_list()
    for row, hypothesis in enumerate(got):
        one = slice(row, row + 1)
        alone = CtcGreedy(blank_id, fused(batch.tree(row), lm, job), weight)(log_probs[one], lengths[one])
        assert_same(hypothesis, alone.to_list()[0], message=f"greedy row {row}")
        expected = greedy_one(log_probs[row, : int(lengths[row])], blank_id,
                              fused_reference(batch, row, lm, job_reference), weight)
        assert_same(hypothesis, expected, 1e-4, f"greedy row {row} against the reference")
    config = CtcBeamConfig(beam_size=4, lm_weight=weight, insertion_bonus=0.3)
    # the compiled CPU search (the writer's) reads the rows' tree arrays; with an LM or a job tree (a sum) the torch
    # search runs, as in the writer stage
    searches = [CtcBeamSearch] + ([CpuCtcBeamSearch] if lm is None and job is None else [])
    for search in searches:
        got = search(blank_id, config, fused(batch.rows, lm, job))(log_probs, lengths).to_list()
        for row, hypothesis in enumerate(got):
            one = slice(row, row + 1)
            alone = search(blank_id, config, fused(batch.tree(row), lm, job))(log_probs[one], lengths[one])
            assert_same(hypothesis, alone.to_list()[0], message=f"{search.__name__} row {row}")
            expected = prefix_beam_search_one(log_probs[row, : int(lengths[row])], blank_id, 4,
                                              fused_reference(batch, row, lm, job_reference), weight, 0.3)[0]
            assert_same(hypothesis, expected, 1e-4, f"{search.__name__} row {row} against the reference")


def test_two_rows_with_the_same_emissions_each_write_their_own_phrase():
    """Labels 1 and 2 are about equally likely on one frame, label 1 slightly ahead: the row listing [2] writes 2,
    the row listing [1] and the row listing nothing write 1."""
    num_labels, blank_id = 4, 3
    frame = torch.log_softmax(torch.tensor([-5.0, 0.1, 0.0, -5.0], dtype=torch.double), dim=-1)
    blank = torch.log_softmax(torch.tensor([-5.0, -5.0, -5.0, 5.0], dtype=torch.double), dim=-1)
    log_probs = torch.stack([blank, frame, blank]).expand(3, 3, num_labels).contiguous()
    lengths = torch.tensor([3, 3, 3])
    trees = [PhraseBoosting.from_token_sequences([[2]], num_labels - 1),
             PhraseBoosting.from_token_sequences([[1]], num_labels - 1)]
    rows = RowPhraseBoosting.from_sets(trees, [0, 1, NO_SET], num_labels - 1)
    for search in (CtcGreedy(blank_id, rows, 0.5), CtcBeamSearch(blank_id, CtcBeamConfig(beam_size=3, lm_weight=0.5),
                                                                  rows),
                   CpuCtcBeamSearch(blank_id, CtcBeamConfig(beam_size=3, lm_weight=0.5), rows)):
        assert [h.tokens for h in search(log_probs, lengths).to_list()] == [[2], [1], [1]], type(search).__name__
