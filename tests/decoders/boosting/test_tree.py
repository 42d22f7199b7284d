"""Phrase boosting (`decoders/boosting/tree.py`) against the direct phrase-matching reference (`tests/reference/
boosting.py`), on cases with obvious answers, and fused by every decoder against the reference decoders.

Scores of the tree are float32 and the reference's float64: totals are compared within 1e-4.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoders.boosting.tree import (
    PhraseBoosting,
    PhraseListError,
    WeightedSum,
    parse_phrase_lines,
    phrase_token_sequences,
    read_phrase_list,
)
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
from tests.reference.boosting import ReferenceBoosting
from tests.reference.ctc import BigramLm, greedy_one, prefix_beam_search_one
from tests.reference.transducer_beam import alsd_decode, maes_decode
from tests.reference.transducer_greedy import greedy_decode

LN2, LN3, LN4 = math.log(2), math.log(3), math.log(4)


def random_phrases(rng: random.Random, vocab_size: int, count: int | None = None, max_length: int = 5):
    count = count or rng.randint(1, 7)
    sequences = [[rng.randrange(vocab_size) for _ in range(rng.randint(1, max_length))] for _ in range(count)]
    weights = [rng.choice([None, None, 0.5, 2.5]) for _ in sequences]
    return sequences, weights


def both(sequences, vocab_size, weights=None):
    return (PhraseBoosting.from_token_sequences(sequences, vocab_size, weights),
            ReferenceBoosting(sequences, vocab_size, weights))


# --- the tree against the reference ------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_sequence_scores_match_the_reference(seed):
    rng = random.Random(seed)
    vocab_size = rng.randint(1, 6)
    sequences, weights = random_phrases(rng, vocab_size)
    tree, reference = both(sequences, vocab_size, weights)
    for _ in range(6):
        # tokens drawn near the phrases, so matches, partial matches and failures all happen
        tokens = [t for _ in range(rng.randint(0, 4)) for t in rng.choice(sequences)[: rng.randint(1, 5)]]
        tokens = [t if rng.random() > 0.2 else rng.randrange(vocab_size) for t in tokens]
        for final in (True, False):
            assert tree.score_sequence(tokens, final) == pytest.approx(reference.score_tokens(tokens, final), abs=1e-4)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_advance_over_every_state_matches_the_reference(seed):
    rng = random.Random(seed)
    vocab_size = rng.randint(1, 6)
    sequences, weights = random_phrases(rng, vocab_size)
    tree, reference = both(sequences, vocab_size, weights)
    # every state of the tree is reached by its prefix: walk each phrase's prefixes in both
    for tokens in sequences:
        state, reference_state = tree.initial_states(1), reference.initial_states(1)
        for token in tokens:
            scores, next_states = tree.advance(state)
            expected, expected_next = reference.advance(reference_state)
            assert scores.double() == pytest.approx(expected, abs=1e-5)
            assert tree.final_scores(state).double() == pytest.approx(reference.final_scores(reference_state),
                                                                      abs=1e-5)
            # the states reached are the same prefixes: their scores agree on the next step
            for label in range(vocab_size):
                got = tree.advance(next_states[:, label])[0].double()
                assert got == pytest.approx(reference.advance(expected_next[:, label])[0], abs=1e-5)
            state, reference_state = next_states[:, token], expected_next[:, token]
    batch = torch.arange(tree.num_states)  # the CPU's resolved arcs equal the backoff walk (the GPU's way)
    scores, next_states = tree.advance(batch)
    labels = torch.arange(vocab_size).expand(tree.num_states, vocab_size)
    walked, walked_next = walk_torch(tree.tensors, batch, labels)
    assert torch.equal(next_states, walked_next)
    assert torch.allclose(scores, walked, atol=1e-5)


# --- obvious answers -----------------------------------------------------------------------------------------
def test_a_whole_phrase_earns_its_depth_scores_and_a_failed_one_nothing():
    tree, _ = both([[1, 2, 3]], 6)
    full = 1.0 + (2.0 + LN2) + (2.0 + LN3)
    assert tree.score_sequence([1, 2, 3]) == pytest.approx(full, abs=1e-5)
    assert tree.score_sequence([0, 1, 2, 3, 0]) == pytest.approx(full, abs=1e-5)
    assert tree.score_sequence([1, 2, 4]) == pytest.approx(0.0, abs=1e-5)  # taken back at 4
    assert tree.score_sequence([1, 2], final=False) == pytest.approx(1.0 + 2.0 + LN2, abs=1e-5)
    assert tree.score_sequence([1, 2]) == pytest.approx(0.0, abs=1e-5)  # taken back at the end
    assert tree.score_sequence([1, 2, 3, 1, 2, 3]) == pytest.approx(2 * full, abs=1e-5)
    assert tree.score_sequence([1, 1, 2, 3]) == pytest.approx(full, abs=1e-5)  # the failed 1 restarts the match


def test_nested_phrases():
    tree, reference = both([[1, 2], [1, 2, 3]], 6)
    short, long = 1.0 + 2.0 + LN2, 1.0 + 2.0 + LN2 + 2.0 + LN3
    assert tree.score_sequence([1, 2]) == pytest.approx(short, abs=1e-5)
    assert tree.score_sequence([1, 2, 3]) == pytest.approx(long, abs=1e-5)
    assert tree.score_sequence([1, 2, 4]) == pytest.approx(short, abs=1e-5)  # the short phrase keeps its reward
    inner, _ = both([[2, 3], [1, 2, 3, 4]], 6)  # a phrase inside another: failing the outer keeps the inner
    assert inner.score_sequence([1, 2, 3, 5]) == pytest.approx(1.0 + 2.0 + LN2, abs=1e-5)
    assert reference.score_tokens([1, 2, 4]) == pytest.approx(short)


def test_overlapping_phrases_follow_the_failure_arcs():
    # "1 2" and "2 3": in 1 2 3 the first match ends at 2, and 2 also starts the second phrase
    tree, reference = both([[1, 2], [2, 3]], 6)
    phrase = 1.0 + 2.0 + LN2
    assert tree.score_sequence([2, 3]) == pytest.approx(phrase, abs=1e-5)
    assert tree.score_sequence([1, 2], final=False) == pytest.approx(phrase, abs=1e-5)
    # NeMo's tree: from the end of "1 2" the state falls (backoff 0) to "2", the start of "2 3"; when that fails,
    # the 1.0 "2" was given as a start is taken back, from the reward of "1 2"
    assert tree.score_sequence([1, 2]) == pytest.approx(phrase - 1.0, abs=1e-5)
    assert tree.score_sequence([1, 2, 4]) == pytest.approx(phrase - 1.0, abs=1e-5)
    # after "1 2" (a whole phrase, backoff 0) the state falls to "2", which then completes "2 3"
    assert tree.score_sequence([1, 2, 3]) == pytest.approx(phrase + (2.0 + LN2), abs=1e-5)
    assert tree.score_sequence([1, 2, 3]) == pytest.approx(reference.score_tokens([1, 2, 3]), abs=1e-5)
    # a partial match whose suffix is a partial match of another phrase keeps only the suffix's part
    partial, _ = both([[1, 2, 4], [2, 3]], 6)
    assert partial.score_sequence([1, 2, 3]) == pytest.approx(1.0 + 2.0 + LN2, abs=1e-5)


def test_per_phrase_weights_and_shared_prefixes():
    tree, reference = both([[1, 2], [1, 3]], 6, weights=[3.0, None])
    assert tree.score_sequence([1, 2]) == pytest.approx(3.0 + 6.0 + LN2, abs=1e-5)
    # the shared first token takes the larger score; the second phrase's own token its own
    assert tree.score_sequence([1, 3]) == pytest.approx(3.0 + 2.0 + LN2, abs=1e-5)
    assert tree.score_sequence([1, 3]) == pytest.approx(reference.score_tokens([1, 3]), abs=1e-5)
    # the order of the phrases does not matter
    swapped, _ = both([[1, 3], [1, 2]], 6, weights=[None, 3.0])
    for tokens in ([1, 2], [1, 3], [1, 4], [1]):
        assert swapped.score_sequence(tokens) == pytest.approx(tree.score_sequence(tokens), abs=1e-6)


def test_word_start_variants():
    # a toy tokenizer: 0 = "▁", words spelled letter by letter; the word start merged into the first letter
    pieces = ["▁", "a", "b", "c", "▁a", "▁b", "▁c"]
    ids = {piece: index for index, piece in enumerate(pieces)}

    def encode_word(word):
        return [ids["▁" + word[0]], *(ids[c] for c in word[1:])]

    def encode_inner(word):
        return [ids[c] for c in word]

    spellings = phrase_token_sequences(["ab", "c"], encode_word, encode_inner, ids["▁"])
    assert spellings[0] == [ids["▁a"], ids["b"], ids["▁c"]]  # canonical first
    assert sorted(map(tuple, spellings)) == sorted([
        (ids["▁a"], ids["b"], ids["▁c"]), (ids["▁"], ids["a"], ids["b"], ids["▁c"]),
        (ids["▁a"], ids["b"], ids["▁"], ids["c"]), (ids["▁"], ids["a"], ids["b"], ids["▁"], ids["c"])])
    tree = PhraseBoosting.from_token_sequences(spellings, len(pieces))
    canonical = tree.score_sequence(spellings[0])
    split = tree.score_sequence([ids["▁"], ids["a"], ids["b"], ids["▁"], ids["c"]])
    assert canonical > 0 and split > canonical  # both spellings are rewarded (the longer one more, per token)
    assert phrase_token_sequences(["ab"], encode_word, None, None) == [[ids["▁a"], ids["b"]]]


def test_phrase_lists_name_the_file_and_line(tmp_path):
    phrases = parse_phrase_lines(["rachel perkins", "  anna   boyle\t2.5", "o'brien"], "list.txt")
    assert [(p.text, p.weight) for p in phrases] == [("rachel perkins", None), ("anna boyle", 2.5), ("o'brien", None)]
    for lines, line, message in ((["a", ""], 2, "empty phrase"), (["a", "\t2"], 2, "empty phrase"),
                                 (["a", "b\tx"], 2, "number > 0"), (["b\t-1"], 1, "number > 0"),
                                 (["b\tnan"], 1, "number > 0"), (["b\t0"], 1, "number > 0")):
        with pytest.raises(PhraseListError, match=f"list.txt, line {line}: .*{message}"):
            parse_phrase_lines(lines, "list.txt")
    with pytest.raises(PhraseListError, match="no phrases"):
        parse_phrase_lines([], "list.txt")
    path = tmp_path / "names.txt"
    path.write_text("anna boyle\njeff fox\t3\n", encoding="utf-8")
    assert [p.where for p in read_phrase_list(str(path))] == [f"{path}, line 1", f"{path}, line 2"]
    path.write_bytes(b"anna\n\xff\xfe\n")
    with pytest.raises(PhraseListError, match="not UTF-8"):
        read_phrase_list(str(path))


def test_bad_token_sequences_are_refused():
    with pytest.raises(ValueError, match="empty token sequence"):
        PhraseBoosting.from_token_sequences([[1], []], 4)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        PhraseBoosting.from_token_sequences([[1, 4]], 4)
    with pytest.raises(ValueError, match="states must be"):
        PhraseBoosting.from_token_sequences([[1]], 4).advance(torch.zeros(2, 2, dtype=torch.long))


# --- with an n-gram LM ----------------------------------------------------------------------------------------
def test_weighted_sum_adds_weighted_scores_and_keeps_both_states():
    rng = random.Random(3)
    vocab_size = 5
    sequences, weights = random_phrases(rng, vocab_size)
    boosting = PhraseBoosting.from_token_sequences(sequences, vocab_size, weights)
    lm = BigramLm.random(vocab_size, seed=4)
    fused = WeightedSum(lm, 0.7, boosting, 1.9)
    tokens = [rng.randrange(vocab_size) for _ in range(12)]
    state, lm_state, boost_state = fused.initial_states(1), lm.initial_states(1), boosting.initial_states(1)
    for token in tokens:
        scores, next_states = fused.advance(state)
        lm_scores, lm_next = lm.advance(lm_state)
        boost_scores, boost_next = boosting.advance(boost_state)
        assert scores == pytest.approx(0.7 * lm_scores + 1.9 * boost_scores.double(), abs=1e-6)
        assert torch.equal(next_states, lm_next * boosting.num_states + boost_next)
        labels = torch.tensor([[token, (token + 1) % vocab_size]])
        some, some_next = fused.score_labels(state, labels)
        assert some == pytest.approx(scores.gather(1, labels), abs=1e-6)
        assert torch.equal(some_next, next_states.gather(1, labels))
        state, lm_state, boost_state = next_states[:, token], lm_next[:, token], boost_next[:, token]
    assert fused.final_scores(state) == pytest.approx(0.7 * lm.final_scores(lm_state)
                                                      + 1.9 * boosting.final_scores(boost_state).double(), abs=1e-6)
    with pytest.raises(ValueError, match="same labels"):
        WeightedSum(BigramLm.random(4), 1.0, boosting, 1.0)


# --- every decoder fuses it as its reference does -------------------------------------------------------------
FUSED = settings(max_examples=15, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def phrases_for(seed: int, vocab_size: int):
    """Phrases drawn so that random decoders meet them: short, over few labels."""
    rng = random.Random(seed)
    labels = rng.sample(range(vocab_size), min(4, vocab_size))
    sequences = [[rng.choice(labels) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 5))]
    return sequences, [rng.choice([None, 2.0]) for _ in sequences]


@FUSED
@given(st.integers(0, 2**31 - 1), st.sampled_from((0.5, 2.0)), st.integers(1, 4))
def test_label_looping_greedy_with_boosting_matches_reference(seed, weight, window):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([0, 1, 17, 30, 9])
    encoder_output = torch.randn(5, 30, 16, generator=generator, dtype=torch.double)
    sequences, weights = phrases_for(seed, GREEDY_VOCAB)
    tree, reference = both(sequences, GREEDY_VOCAB, weights)
    for kind in ("rnnt", "tdt01234"):
        model = greedy_model(kind, "realistic")
        expected = greedy_decode(model, encoder_output, lengths, 3, lm=reference, lm_weight=weight)
        got = LabelLoopingGreedy(model, GreedyConfig(max_symbols=3, window_size=window, lm_weight=weight),
                                 lm=tree)(encoder_output, lengths).to_list()
        for g, e in zip(got, expected):
            assert (g.tokens, g.frame_indices, g.durations) == (e.tokens, e.frame_indices, e.durations)
            assert g.score == pytest.approx(e.score, abs=1e-4)


def _beam_agree(batched, reference, beam_size):
    for got, expected in zip(batched.to_list(), reference):
        assert (got.tokens, got.frame_indices, got.durations) == (expected[0].tokens, expected[0].frame_indices,
                                                                  expected[0].durations)
        assert got.score == pytest.approx(expected[0].score, abs=1e-4)


@FUSED
@given(st.integers(0, 2**31 - 1), st.sampled_from(("early", "late")), st.sampled_from(("none", "weighted")),
       st.booleans())
def test_transducer_beam_searches_with_boosting_match_reference(seed, pruning, scoring, with_lm):
    encoder_output, lengths = random_inputs(4, 8, seed, [0, 1, 8, 5])
    sequences, weights = phrases_for(seed, VOCAB_SIZE)
    tree, reference = both(sequences, VOCAB_SIZE, weights)
    if with_lm:  # the n-gram part: a bigram table; the reference's states are numbered as it meets them
        lm = BigramLm.random(VOCAB_SIZE, seed=seed % 97)
        reference.num_states = 10**6
        tree, reference = WeightedSum(lm, 0.4, tree, 0.6), WeightedSum(lm, 0.4, reference, 0.6)
    config = BeamSearchConfig(beam_size=3, max_symbols_per_frame=3, lm_weight=1.5, pruning=pruning,
                              blank_lm_scoring=scoring, window_size=4)
    for kind in ("rnnt", "tdt01234"):
        model = tiny_model(kind)
        _beam_agree(AlsdBeamSearch(model, config, tree)(encoder_output, lengths),
                    alsd_decode(model, encoder_output, lengths, config, reference), config.beam_size)
    model = tiny_model("rnnt")
    expected = maes_decode(model, encoder_output, lengths, config, reference)
    _beam_agree(AesBeamSearch(model, config, tree)(encoder_output, lengths), expected, config.beam_size)
    _beam_agree(AesSkipBlankSearch(model, config, tree)(encoder_output, lengths), expected, config.beam_size)


@FUSED
@given(st.integers(0, 2**31 - 1), st.sampled_from((0.5, 3.0)))
def test_ctc_greedy_and_beam_with_boosting_match_reference(seed, weight):
    num_labels, blank_id = 6, 5
    lengths = torch.tensor([0, 1, 12, 20])
    log_probs = emissions("peaky", 4, 20, num_labels, blank_id, seed)
    sequences, weights = phrases_for(seed, num_labels - 1)
    tree, reference = both(sequences, num_labels - 1, weights)
    expected = [greedy_one(log_probs[b, : int(lengths[b])], blank_id, reference, weight) for b in range(4)]
    for got, e in zip(CtcGreedy(blank_id, tree, weight)(log_probs, lengths).to_list(), expected):
        assert (got.tokens, got.frame_indices) == (e.tokens, e.frame_indices)
        assert got.score == pytest.approx(e.score, abs=1e-4)
    config = CtcBeamConfig(beam_size=4, lm_weight=weight, insertion_bonus=0.3)
    expected = [prefix_beam_search_one(log_probs[b, : int(lengths[b])], blank_id, 4, reference, weight, 0.3)[0]
                for b in range(4)]
    # the torch search, and the compiled CPU search the writer stage runs (it reads the tree's back-off arrays)
    for search in (CtcBeamSearch, CpuCtcBeamSearch):
        for got, e in zip(search(blank_id, config, tree)(log_probs, lengths).to_list(), expected):
            assert (got.tokens, got.frame_indices) == (e.tokens, e.frame_indices), search.__name__
            assert got.score == pytest.approx(e.score, abs=1e-4)


@pytest.mark.gpu
def test_gpu_advance_equals_cpu():
    rng = random.Random(5)
    sequences, weights = random_phrases(rng, 50, count=300, max_length=8)
    tree = PhraseBoosting.from_token_sequences(sequences, 50, weights)
    states = torch.arange(tree.num_states)
    scores, next_states = tree.advance(states)
    on_gpu = tree.to("cuda")
    for use_triton in (False, None):
        on_gpu.use_triton = use_triton
        gpu_scores, gpu_next = on_gpu.advance(states.cuda())
        assert torch.equal(gpu_next.cpu(), next_states)
        assert torch.allclose(gpu_scores.cpu(), scores, atol=1e-6)


# --- an obvious answer on the bundled model ------------------------------------------------------------------
CONTACTS = ["luis phillips", "luis williams", "jeffrey phillips", "heather lucero", "anna boyle", "jeff fox",
            "rachel perkins", "sara holden", "desiree diaz", "kimberly garcia", "phillip ward", "lisa carlson"]


@pytest.mark.nemo
def test_a_contact_name_the_model_misspells_is_corrected_only_with_boosting(tmp_path):
    """The bundled model writes "call luis phillips" (samples/domain dev107) as "call luice filips" (greedy,
    ALSD++) and "call luis fillips" (CTC beam); with the contact list boosted, each strategy writes the name."""
    import soundfile

    from pipeline.config import BUNDLED_MODEL
    from pipeline.decoding.fusion import load_fusion_model
    from pipeline.decoding.plan import DecodingConfig, decode_in_process, plan_decoding
    from pipeline.decoding.recognize import pad_waveforms
    from pipeline.model.nemo import load_asr_model

    root = BUNDLED_MODEL.parent.parent
    model = load_asr_model(str(BUNDLED_MODEL))
    audio = soundfile.read(root / "samples" / "domain" / "audio" / "dev107.flac", dtype="float32")[0]
    encoder_output, encoder_lengths = model.encode(*pad_waveforms([audio]))
    phrases = tmp_path / "contacts.txt"
    phrases.write_text("\n".join(CONTACTS) + "\n")

    def text(strategy: str, boosted: bool) -> str:
        config = DecodingConfig(strategy=strategy, beam_size=4, phrases_uri=str(phrases) if boosted else None)
        plan = plan_decoding(model.facts, config)
        decode = decode_in_process(model, plan, load_fusion_model(plan, model, str(tmp_path / "cache")))
        return model.tokenizer.ids_to_text(decode(encoder_output, encoder_lengths)[0].tokens)

    for strategy in ("greedy", "alsd", "ctc_beam"):
        assert "luis phillips" not in text(strategy, boosted=False), strategy
        assert text(strategy, boosted=True) == "call luis phillips", strategy


# --- the plan's one decision: how the two weights reach the decoders ---------------------------------------
def test_the_plan_fuses_lm_and_phrases_as_one_model_at_the_sum_of_their_weights():
    from pipeline.decoding.plan import DecodingConfig, describe, plan_decoding, results_identity
    from pipeline.model.nemo_file import ModelFacts

    facts = ModelFacts(kind="hybrid_rnnt_ctc", durations=(), sample_rate=16000, max_symbols=10)
    lm = BigramLm.random(5, seed=1)
    tree = PhraseBoosting.from_token_sequences([[1, 2]], 5)
    both_config = DecodingConfig(lm_uri="lm.bin", lm_weight=0.3, phrases_uri="names.txt", boost_weight=0.6)
    plan = plan_decoding(facts, both_config)
    assert (plan.lm_weight, plan.boost_weight) == (0.3, 0.6) and plan.fusion_weight == pytest.approx(0.9)
    fused = plan.fusion_model(lm, tree)
    assert isinstance(fused, WeightedSum)
    assert (fused.first_weight, fused.second_weight) == pytest.approx((1 / 3, 2 / 3))
    states = fused.initial_states(1)
    scores = fused.advance(states)[0]  # what a decoder adds, at its weight fusion_weight
    assert plan.fusion_weight * scores == pytest.approx(0.3 * lm.advance(lm.initial_states(1))[0]
                                                        + 0.6 * tree.advance(tree.initial_states(1))[0].double())
    assert "phrases=names.txt boost_weight=0.6" in describe(both_config)

    alone = plan_decoding(facts, DecodingConfig(phrases_uri="names.txt", boost_weight=0.7))
    assert alone.fusion_weight == 0.7 and alone.fusion_model(None, tree) is tree
    assert alone.fusion_model(lm, tree) is tree  # no LM in the config: a given one is not fused
    plain = plan_decoding(facts, DecodingConfig(boost_weight=0.7))  # a weight without phrases boosts nothing
    assert plain.fusion_weight == 0 and plain.fusion_model(None, tree) is None
    assert results_identity(DecodingConfig(phrases_uri="a.txt")) != results_identity(DecodingConfig(phrases_uri="b"))
    for bad in (dict(phrases_uri="x", boost_weight=0.0), dict(boost_weight=float("nan")),
                dict(phrases_uri="x", boost_weight=-1.0)):
        with pytest.raises(ValueError, match="boost_weight"):
            DecodingConfig(**bad)
