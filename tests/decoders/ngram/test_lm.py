"""NgramLm against the dict-based reference and KenLM on random ARPA files of orders 2-10.

KenLM (`MAX_ORDER=10 pip install --no-cache-dir kenlm`) refuses ARPA files whose pruning dropped the context
of a kept n-gram (its probing and trie loaders alike); such files are checked against the dict reference,
which applies the backoff formula to the file as it is, and against KenLM on the file with those contexts
restored (probability derived through backoff, backoff 0: the same distribution).
"""

from __future__ import annotations

import gzip
import math
import random
import subprocess

import pytest
import torch

from decoders.ngram.arpa import (
    KENLM_MISSING_UNK_LOG10,
    UNK_ID,
    ArpaFormatError,
    add_missing_prefixes,
    id_to_token,
    read_arpa,
    write_arpa,
)
from decoders.ngram.binary import NgramFileError
from decoders.ngram.lm import NgramLm
from decoders.ngram.tensors import BOS_STATE, advance_torch, scatter_arcs_torch, walk_torch
from tests.decoders.ngram.arpa_factory import random_ngrams, random_token_sequences
from tests.reference.ngram import DictNgramLm

LN10 = math.log(10.0)
ORDERS = range(2, 11)


def random_case(tmp_path, seed: int, order: int, drop_prefixes: float = 0.0, with_unk: bool = True,
                vocab_size: int | None = None, ngrams_per_order: int = 40):
    for attempt in range(20):  # a random walk can run out of extensions before the highest order: redraw
        rng = random.Random(seed * 100 + order + 10_000 * attempt)
        size = vocab_size or rng.randint(3, 24)
        ngrams = random_ngrams(rng, order, size, ngrams_per_order=ngrams_per_order, drop_prefixes=drop_prefixes,
                               with_unk=with_unk)
        if max(len(key) for key in ngrams) == order:
            break
    vocab_size = size
    path = tmp_path / f"lm_{seed}_{order}_{drop_prefixes}_{with_unk}.arpa"
    write_arpa(path, ngrams)
    sequences = random_token_sequences(rng, vocab_size, 24, 14, ngrams)
    return path, vocab_size, sequences


def padded(sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max([len(s) for s in sequences] + [1])
    tokens = torch.tensor([s + [0] * (width - len(s)) for s in sequences], dtype=torch.long)
    return tokens, torch.tensor([len(s) for s in sequences])


def states_after(lm: NgramLm, sequences: list[list[int]], bos: list[bool] | None = None) -> torch.Tensor:
    """The LM state after each sequence (from <s>, or where `bos` says from the empty context), by following
    advance's next states."""
    states = lm.initial_states(len(sequences))
    if bos is not None:
        starts_empty = ~torch.tensor(bos, dtype=torch.bool)
        states = torch.where(starts_empty, lm.initial_states(len(sequences), bos=False), states)
    for position in range(max([len(s) for s in sequences] + [0])):
        _, next_states = lm.advance(states)
        for row, sequence in enumerate(sequences):
            if position < len(sequence):
                states[row] = next_states[row, sequence[position]]
    return states


# --- against the dict-based reference (no third-party code needed) ------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("drop_prefixes", [0.0, 0.4])
def test_scores_match_reference(tmp_path, order, drop_prefixes):
    for seed in range(2):
        path, vocab_size, sequences = random_case(tmp_path, seed, order, drop_prefixes, with_unk=seed == 0)
        lm, reference = NgramLm.from_arpa(path, vocab_size), DictNgramLm(str(path))
        tokens, lengths = padded(sequences)
        got = lm.score_sequences(tokens, lengths).tolist()
        expected = [reference.score(s) for s in sequences]
        assert got == pytest.approx(expected, abs=1e-4, rel=1e-6)
        no_ends = lm.score_sequences(tokens, lengths, bos=False, eos=False).tolist()
        assert no_ends == pytest.approx([reference.score(s, bos=False, eos=False) for s in sequences], abs=1e-4,
                                        rel=1e-6)
        # advance over the whole vocabulary, from the state each sequence leads to
        scores, _ = lm.advance(states_after(lm, sequences))
        for row, sequence in enumerate(sequences):
            assert scores[row].tolist() == pytest.approx(reference.next_scores(sequence, vocab_size), abs=1e-4,
                                                         rel=1e-6)


TENSOR_NAMES = ("arc_offsets", "arc_keys", "arc_weights", "arc_targets", "backoff_targets", "backoff_weights",
                "final_weights")


def labels_into(reference: DictNgramLm, context: tuple[str, ...], vocab_size: int) -> tuple[bool, list[int]] | None:
    """A context of the reference (words) as (starts with <s>, the labels that lead there), or None where no
    label sequence leads there (a `<unk>` context when the file lists every label)."""
    unlisted = [label for label in range(vocab_size) if not reference.lists(label)]
    bos = context[:1] == ("<s>",)
    labels = []
    for word in context[1:] if bos else context:
        if word == "<unk>" and unlisted:
            labels.append(unlisted[0])
        elif len(word) == 1 and 0 <= ord(word) - 100 < vocab_size:
            labels.append(ord(word) - 100)
        else:
            return None
    return bos, labels


@pytest.mark.parametrize("order", range(1, 11))
def test_every_context_is_one_state_that_scores_as_the_reference(tmp_path, order):
    """The compiled LM has one state per context the file implies, reached through advance alone; each scores
    every label and `</s>` as the dict reference does after that context, and each label leads to the state of
    the context the reference says it leaves. Covers states and arcs no random sentence reaches."""
    for drop_prefixes, with_unk in [(0.0, True), (0.4, False), (0.4, True)]:
        path, vocab_size, _ = random_case(tmp_path, 13, order, drop_prefixes, with_unk=with_unk)
        lm, reference = NgramLm.from_arpa(path, vocab_size), DictNgramLm(str(path))
        contexts = reference.contexts()
        assert (lm.max_order, lm.tensors.num_states) == (reference.max_order, len(contexts)), (drop_prefixes, with_unk)
        reachable = {context: labels_into(reference, context, vocab_size) for context in contexts}
        reachable = {context: found for context, found in reachable.items() if found is not None}
        states = states_after(lm, [labels for _, labels in reachable.values()],
                              bos=[bos for bos, _ in reachable.values()])
        state_of = dict(zip(reachable, states.tolist()))
        assert len(set(state_of.values())) == len(reachable)  # distinct contexts are distinct states
        scores, next_states = lm.advance(states)
        final_scores = lm.final_scores(states)
        for row, (context, (bos, labels)) in enumerate(reachable.items()):
            expected = reference.next_scores(labels, vocab_size, bos=bos)
            assert scores[row].tolist() == pytest.approx(expected, abs=1e-4, rel=1e-6), context
            assert float(final_scores[row]) == pytest.approx(reference.end_score(labels, bos=bos), abs=1e-4,
                                                             rel=1e-6), context
            expected_next = [state_of[reference.context_after(context, label)] for label in range(vocab_size)]
            assert next_states[row].tolist() == expected_next, context


def test_structure_invariants(tmp_path):
    path, vocab_size, _ = random_case(tmp_path, 3, 5, drop_prefixes=0.3)
    tensors = NgramLm.from_arpa(path, vocab_size).tensors
    offsets = tensors.arc_offsets
    assert int(offsets[0]) == 0 and int(offsets[1]) == vocab_size  # the empty context owns exactly V arcs
    assert torch.equal(tensors.arc_keys[:vocab_size], torch.arange(vocab_size))
    assert bool((tensors.arc_keys[1:] > tensors.arc_keys[:-1]).all())  # sorted by (state, label), unique
    sources = tensors.arc_keys // vocab_size
    assert torch.equal(offsets, torch.searchsorted(sources, torch.arange(tensors.num_states + 1)))
    assert int(tensors.backoff_targets[0]) == 0 and float(tensors.backoff_weights[0]) == 0.0
    assert bool((tensors.arc_targets >= 0).all()) and bool((tensors.arc_targets < tensors.num_states).all())
    assert tensors.max_state_arcs == int(torch.diff(offsets)[1:].max())  # bounds the Triton kernel's search


# --- against KenLM ---------------------------------------------------------------------------------------------
def kenlm_model(path, tmp_path, restore_contexts: bool):
    """KenLM's model of the file; KenLM refuses n-grams whose context is not listed (probing and trie alike),
    so a pruned file is given to it with those contexts restored (backoff-derived probability, backoff 0)."""
    kenlm = pytest.importorskip("kenlm")
    if restore_contexts:
        ngrams = {}
        arpa = read_arpa(path)
        for tokens, probs, backoffs in zip(arpa.tokens, arpa.log10_probs, arpa.log10_backoffs):
            for row, prob, backoff in zip(tokens.tolist(), probs.tolist(), backoffs.tolist()):
                ngrams[tuple(row)] = (prob, backoff)
        add_missing_prefixes(ngrams, ngrams.get((UNK_ID,), (KENLM_MISSING_UNK_LOG10, 0.0))[0])
        path = tmp_path / (path.name + ".restored.arpa")
        write_arpa(path, ngrams)
    try:
        return kenlm.Model(str(path))
    except OSError as error:
        if "compiled" in str(error) or "order" in str(error):
            pytest.skip(f"this kenlm module cannot load the file; install with MAX_ORDER=10 ({error})")
        raise


def kenlm_token_scores(model, sequence: list[int]) -> list[float]:
    kenlm = pytest.importorskip("kenlm")
    state, out = kenlm.State(), kenlm.State()
    model.BeginSentenceWrite(state)
    scores = []
    for word in [id_to_token(t) for t in sequence] + ["</s>"]:
        scores.append(model.BaseScore(state, word, out) * LN10)
        state, out = out, state
    return scores


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("drop_prefixes", [0.0, 0.4])
def test_scores_and_advance_match_kenlm(tmp_path, order, drop_prefixes):
    kenlm = pytest.importorskip("kenlm")
    path, vocab_size, sequences = random_case(tmp_path, 7, order, drop_prefixes, with_unk=order % 2 == 0)
    model = kenlm_model(path, tmp_path, restore_contexts=drop_prefixes > 0)
    lm = NgramLm.from_arpa(path, vocab_size)
    assert model.order == lm.max_order == order
    tokens, lengths = padded(sequences)
    got = lm.score_sequences(tokens, lengths).tolist()
    for sequence, total in zip(sequences, got):
        per_token = kenlm_token_scores(model, sequence)
        assert total == pytest.approx(math.fsum(per_token), abs=1e-4, rel=1e-6)
    # advance over the whole vocabulary equals one KenLM query per label, from every reached state
    states = states_after(lm, sequences)
    scores, _ = lm.advance(states)
    labels = [id_to_token(label) for label in range(vocab_size)]
    for row, sequence in enumerate(sequences):
        state, scratch = kenlm.State(), kenlm.State()
        model.BeginSentenceWrite(state)
        for word in [id_to_token(t) for t in sequence]:
            model.BaseScore(state, word, scratch)
            state, scratch = scratch, state
        expected = [model.BaseScore(state, label, scratch) * LN10 for label in labels]
        assert scores[row].tolist() == pytest.approx(expected, abs=1e-4, rel=1e-6)
        assert float(lm.final_scores(states[row : row + 1])[0]) == pytest.approx(
            model.BaseScore(state, "</s>", scratch) * LN10, abs=1e-4, rel=1e-6)


@pytest.mark.parametrize("order", [2, 5, 10])
def test_cpu_scatter_equals_the_static_walk(tmp_path, order):
    """The CPU advance (arcs scattered per chain level) and the GPU one (walk per label) agree bit for bit."""
    path, vocab_size, _ = random_case(tmp_path, 12, order, drop_prefixes=0.3, vocab_size=40, ngrams_per_order=120)
    tensors = NgramLm.from_arpa(path, vocab_size).tensors
    states = torch.cat([torch.arange(tensors.num_states), torch.zeros(3, dtype=torch.long)])
    labels = torch.arange(vocab_size).expand(states.shape[0], vocab_size)
    scattered, walked = scatter_arcs_torch(tensors, states), walk_torch(tensors, states, labels)
    assert torch.equal(scattered[0], walked[0]) and torch.equal(scattered[1], walked[1])
    assert scatter_arcs_torch(tensors, states[:0])[0].shape == (0, vocab_size)


@pytest.mark.parametrize("order", [2, 5, 10])
def test_compiled_cpu_advance_equals_the_static_walk(tmp_path, order):
    """`NgramLm.advance` on the CPU (the compiled kernel of decoders/ngram/compiled.py) gives the walk's scores
    and next states bit for bit, for every state, and for a batch in any order with repeats."""
    from decoders.ngram.compiled import LmArrays, advance_compiled

    path, vocab_size, _ = random_case(tmp_path, 13, order, drop_prefixes=0.3, vocab_size=40, ngrams_per_order=120)
    lm = NgramLm.from_arpa(path, vocab_size)
    tensors = lm.tensors
    generator = torch.Generator().manual_seed(order)
    every = torch.arange(tensors.num_states)
    for states in (every, every[torch.randperm(len(every), generator=generator)].repeat(2), every[:1]):
        labels = torch.arange(vocab_size).expand(states.shape[0], vocab_size)
        walked, advanced = walk_torch(tensors, states, labels), lm.advance(states)
        assert advanced[0].dtype == torch.float32 and advanced[1].dtype == torch.long
        assert torch.equal(advanced[0], walked[0]) and torch.equal(advanced[1], walked[1])
    empty = advance_compiled(LmArrays.of(tensors), every[:0])
    assert empty[0].shape == (0, vocab_size) and empty[1].shape == (0, vocab_size)


# --- Triton twin, binary format, gzip, devices -----------------------------------------------------------------
def test_triton_equals_torch_under_interpreter(tmp_path):
    """Runs the kernel on the CPU in a subprocess with TRITON_INTERPRET=1 (it must be set before triton loads)."""
    pytest.importorskip("triton")
    path, vocab_size, _ = random_case(tmp_path, 11, 6, drop_prefixes=0.3, vocab_size=150, ngrams_per_order=150)
    script = f"""
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
from decoders.ngram.lm import NgramLm
from decoders.ngram.tensors import advance_torch
from decoders.ngram.triton import advance_triton
lm = NgramLm.from_arpa({str(path)!r}, {vocab_size})
generator = torch.Generator().manual_seed(0)
for batch_size in (1, 5):
    states = torch.randint(0, lm.tensors.num_states, (batch_size,), generator=generator)
    expected_scores, expected_next = advance_torch(lm.tensors, states)
    scores, next_states = advance_triton(lm.tensors, states)
    assert torch.equal(next_states, expected_next), "next states differ"
    assert torch.allclose(scores, expected_scores, atol=1e-6, rtol=0), (scores - expected_scores).abs().max()
empty = advance_triton(lm.tensors, torch.zeros(0, dtype=torch.long))
assert empty[0].shape == (0, {vocab_size})
print("ok")
"""
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    result = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": root})
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_binary_round_trip_memory_maps(tmp_path):
    path, vocab_size, sequences = random_case(tmp_path, 5, 4, drop_prefixes=0.3)
    lm = NgramLm.from_arpa(path, vocab_size)
    binary = tmp_path / "lm.bin"
    lm.save(binary)
    loaded = NgramLm.load(binary)
    for name in TENSOR_NAMES:
        assert torch.equal(getattr(loaded.tensors, name), getattr(lm.tensors, name)), name
    assert (loaded.vocab_size, loaded.max_order, loaded.ngram_counts) == (lm.vocab_size, lm.max_order,
                                                                          lm.ngram_counts)
    tokens, lengths = padded(sequences)
    assert torch.equal(loaded.score_sequences(tokens, lengths), lm.score_sequences(tokens, lengths))


def test_binary_rejects_damage_and_other_files(tmp_path):
    path, vocab_size, _ = random_case(tmp_path, 6, 3)
    binary = tmp_path / "lm.bin"
    NgramLm.from_arpa(path, vocab_size).save(binary)
    data = bytearray(binary.read_bytes())
    data[-70] ^= 0xFF
    damaged = tmp_path / "damaged.bin"
    damaged.write_bytes(bytes(data))
    with pytest.raises(NgramFileError, match="checksum"):
        NgramLm.load(damaged)
    NgramLm.load(damaged, verify=False)  # a caller who checked the file before may skip the pass
    with pytest.raises(NgramFileError, match="not a binary"):
        NgramLm.load(path)
    newer = bytearray(binary.read_bytes())
    newer[8] = 99
    (tmp_path / "newer.bin").write_bytes(bytes(newer))
    with pytest.raises(NgramFileError, match="version 99"):
        NgramLm.load(tmp_path / "newer.bin")


def test_gzip_arpa_reads_the_same(tmp_path):
    path, vocab_size, sequences = random_case(tmp_path, 8, 5)
    compressed = tmp_path / "lm.arpa.gz"
    compressed.write_bytes(gzip.compress(path.read_bytes()))
    plain, zipped = NgramLm.from_arpa(path, vocab_size), NgramLm.from_arpa(compressed, vocab_size)
    tokens, lengths = padded(sequences)
    assert torch.equal(plain.score_sequences(tokens, lengths), zipped.score_sequences(tokens, lengths))


def test_protocol_shapes_and_initial_states(tmp_path):
    from decoders.protocols import LanguageModel

    path, vocab_size, _ = random_case(tmp_path, 9, 3)
    lm = NgramLm.from_arpa(path, vocab_size)
    assert isinstance(lm, LanguageModel)
    states = lm.initial_states(4)
    assert states.dtype == torch.long and states.tolist() == [BOS_STATE] * 4
    scores, next_states = lm.advance(states)
    assert scores.shape == next_states.shape == (4, vocab_size)
    assert scores.dtype == torch.float32 and next_states.dtype == torch.long
    assert lm.final_scores(states).shape == (4,)
    assert torch.equal(advance_torch(lm.tensors, states)[0], scores)
    with pytest.raises(ValueError, match="states must be"):
        lm.advance(states.view(2, 2))
    with pytest.raises(ValueError, match="tokens must lie"):
        lm.score_sequences(torch.tensor([[vocab_size]]), torch.tensor([1]))


@pytest.mark.gpu
def test_gpu_torch_and_triton_equal_cpu(tmp_path):
    path, vocab_size, sequences = random_case(tmp_path, 10, 6, drop_prefixes=0.3, vocab_size=300,
                                              ngrams_per_order=300)
    cpu = NgramLm.from_arpa(path, vocab_size)
    states = torch.randint(0, cpu.tensors.num_states, (33,))
    expected_scores, expected_next = cpu.advance(states)
    for use_triton in (False, True):
        gpu = NgramLm(cpu.tensors.to("cuda"), use_triton=use_triton)
        scores, next_states = gpu.advance(states.cuda())
        assert torch.equal(next_states.cpu(), expected_next)
        assert torch.allclose(scores.cpu(), expected_scores, atol=1e-6, rtol=0)


# --- malformed input ---------------------------------------------------------------------------------------------
MALFORMED = {
    "no header": ("\\1-grams:\n-1\tx\n\\end\\\n", r":1: .*no 'ngram N=count'"),
    "bad number": ("\\data\\\nngram 1=2\n\n\\1-grams:\n-1\td\n-x\te\n\n\\end\\\n", r":6: probability"),
    "too many fields": ("\\data\\\nngram 1=1\n\n\\1-grams:\n-1\td\te\t-0.5\n\\end\\\n", r":5: a 1-gram line"),
    "count mismatch": ("\\data\\\nngram 1=3\n\n\\1-grams:\n-1\td\n-1\te\n\n\\end\\\n", r":8: .*holds 2 entries"),
    "word level": ("\\data\\\nngram 1=1\n\n\\1-grams:\n-1\thello\n\\end\\\n", r":5: .*word-level"),
    "positive prob": ("\\data\\\nngram 1=1\n\n\\1-grams:\n0.5\td\n\\end\\\n", r":5: log10 probability"),
    "no end": ("\\data\\\nngram 1=1\n\n\\1-grams:\n-1\td\n", r"ends before"),
    "section order": ("\\data\\\nngram 1=1\nngram 2=0\n\n\\2-grams:\n\\end\\\n", r":5: expected section"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_arpa_names_the_line(tmp_path, name):
    text, message = MALFORMED[name]
    path = tmp_path / "bad.arpa"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ArpaFormatError, match=message):
        NgramLm.from_arpa(path, 5)


def test_tokens_outside_the_vocabulary_are_rejected(tmp_path):
    path = tmp_path / "big.arpa"
    write_arpa(path, {(0,): (-1.0, 0.0), (9,): (-1.0, 0.0), (-1,): (-99.0, 0.0), (-2,): (-1.0, 0.0)})
    with pytest.raises(ArpaFormatError, match="outside the vocabulary"):
        NgramLm.from_arpa(path, 5)


def test_whitespace_like_tokens_are_tokens(tmp_path):
    """chr(133) (NEL) and chr(160) (no-break space) are tokens 33 and 60, not separators."""
    path = tmp_path / "nel.arpa"
    ngrams = {(33,): (-0.5, -0.2), (60,): (-0.7, 0.0), (33, 60): (-0.1, 0.0), (-1,): (-99.0, 0.0),
              (-2,): (-1.0, 0.0)}
    write_arpa(path, ngrams)
    lm = NgramLm.from_arpa(path, 61)
    scores, next_states = lm.advance(lm.initial_states(1, bos=False))
    follow, _ = lm.advance(next_states[:, 33])
    assert float(follow[0, 60]) == pytest.approx(-0.1 * LN10, abs=1e-6)


def test_runs_of_separators_count_as_one(tmp_path):
    path = tmp_path / "spaced.arpa"
    path.write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1.0  d \t-0.5\n-99\t<s>\n\n\\end\\\n", encoding="utf-8")
    lm = NgramLm.from_arpa(path, 1)
    scores, _ = lm.advance(lm.initial_states(1, bos=False))
    assert float(scores[0, 0]) == pytest.approx(-1.0 * LN10, abs=1e-6)
