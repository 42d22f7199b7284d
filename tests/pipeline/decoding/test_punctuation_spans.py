"""Text and word spans of cased, punctuated vocabularies equal NeMo 3.0's, for every kind of head.

Peer: NeMo's own decoding objects (`RNNTBPEDecoding` of an RNN-T and of a TDT model, `CTCBPEDecoding`) of models
with the production shapes' tokenizers (`recipes/production_shapes/`: parakeet-tdt-0.6b-v2's cased, punctuated
1,024 pieces; the multilingual 8,192 with "¿" and "¡"), given the same hypotheses as ours: random token
sequences in which a third of the tokens are punctuation marks or the lone "▁", at random frames with random
TDT durations (transducers), or random frame-level label paths (CTC). NeMo turns them into text and words
(`decode_hypothesis`, `compute_rnnt_timestamps` / `compute_ctc_timestamps`); ours is `transcript_of`
(`pipeline/decoding/recognize.py`, `decoders/timestamps.py`). Punctuation marks join the word before them,
a TDT mark is pinned to the end of the token before it, a CTC mark to its own start, and the text loses the
space SentencePiece writes before a mark that follows a lone "▁" (NeMo's `space_before_punct_pattern`).

The models' encoders are tiny (one layer of width 64): only their vocabularies, blanks and durations matter here.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.nemo

SEQUENCES = 150  # random hypotheses per case; each takes about 1 ms in NeMo


@functools.cache
def models(shape_name: str, kind: str | None = None):
    """(our AsrModel, the NeMo model) of a tiny-encoder model with `shape_name`'s vocabulary (and `kind`: another
    model kind with that vocabulary)."""
    import dataclasses

    from pipeline.model.nemo import AsrModel
    from recipes.production_shapes.shapes import build_random_model, shape_named
    from tests.support.production_shapes import tiny, tokenizer_dir

    shape = tiny(shape_named(shape_name))
    shape = dataclasses.replace(shape, kind=kind) if kind else shape
    nemo_model = build_random_model(shape, tokenizer_dir(shape.text, shape.vocab_size))
    return AsrModel(nemo_model), nemo_model


def hard_tokens(model, rng: np.random.Generator, length: int) -> list[int]:
    """Token ids where a third are punctuation marks or the lone "▁", the rest any piece."""
    from recipes.production_shapes.shapes import punctuation_ids

    tokenizer = model.tokenizer
    special = punctuation_ids(model) + [i for i, piece in enumerate(tokenizer.ids_to_pieces(
        range(tokenizer.vocab_size))) if piece == "▁"]
    return [int(rng.choice(special)) if rng.random() < 0.35 else int(rng.integers(0, tokenizer.vocab_size))
            for _ in range(length)]


def nemo_words(hypothesis) -> list[tuple[str, int, int]]:
    return [(w["word"], int(w["start_offset"]), int(w["end_offset"])) for w in hypothesis.timestamp["word"]
            if w["word"]]


def our_words(transcript) -> list[tuple[str, int, int]]:
    return [(w.text, w.start_frame, w.end_frame) for w in transcript.words]


@pytest.mark.parametrize("shape_name, kind", [("parakeet-tdt-0.6b", "tdt"), ("parakeet-tdt-0.6b-v3", "tdt"),
                                              ("parakeet-rnnt-1.1b", "rnnt")])
def test_transducer_text_and_words_equal_nemos(shape_name, kind):
    from nemo.collections.asr.parts.utils.rnnt_utils import Hypothesis

    from pipeline.decoding.recognize import transcript_of

    model, nemo_model = models(shape_name)
    assert model.facts.is_tdt == (kind == "tdt")
    rng = np.random.default_rng(0)
    marks_seen = 0
    for index in range(SEQUENCES):
        length = int(rng.integers(0, 25))
        tokens = hard_tokens(model, rng, length)
        frames = np.sort(rng.integers(0, 3 * length + 1, length)).tolist()
        durations = rng.integers(0, 5, length).tolist() if kind == "tdt" else None
        hypothesis = Hypothesis(score=0.0, y_sequence=torch.tensor(tokens, dtype=torch.long), dec_state=None,
                                timestamp=torch.tensor(frames, dtype=torch.long),
                                token_duration=None if durations is None else torch.tensor(durations, dtype=torch.long))
        (hypothesis,) = nemo_model.decoding.decode_hypothesis([hypothesis])
        hypothesis = nemo_model.decoding.compute_rnnt_timestamps(hypothesis, "all")
        ours = transcript_of(model, kind, tokens, frames, durations, 0.0)
        where = f"sequence {index}: pieces {ours.pieces} at {frames} lasting {durations}"
        assert ours.text == hypothesis.text, where
        assert our_words(ours) == nemo_words(hypothesis), where
        marks_seen += sum(text in model.tokenizer.punctuation for text in
                          (model.tokenizer.pieces_to_text([p]) for p in ours.pieces))
    assert marks_seen > SEQUENCES  # the rules were exercised


@pytest.mark.parametrize("shape_name", ["parakeet-tdt-0.6b", "parakeet-tdt-0.6b-v3"])
def test_ctc_text_and_words_equal_nemos(shape_name):
    from nemo.collections.asr.parts.utils.rnnt_utils import Hypothesis

    from decoders.ctc.greedy import CtcGreedy
    from pipeline.decoding.recognize import transcript_of

    # the v3 shape is a transducer alone: its vocabulary on a hybrid's CTC head
    model, nemo_model = models(shape_name, "tdt_ctc")
    decoding = nemo_model.ctc_decoding
    decoding.compute_timestamps = True
    blank_id = model.ctc.blank_id
    rng = np.random.default_rng(1)
    for index in range(SEQUENCES):
        frames = int(rng.integers(1, 60))
        path = [blank_id if rng.random() < 0.5 else token for token in hard_tokens(model, rng, frames)]
        path = [path[t - 1] if t and rng.random() < 0.3 else path[t] for t in range(frames)]  # runs of one label
        # as NeMo's greedy_batch leaves it: the frame-level labels, and the frames of the non-blank ones
        hypothesis = Hypothesis(score=0.0, y_sequence=path, length=frames, dec_state=None,
                                timestamp=[t for t, label in enumerate(path) if label != blank_id])
        (hypothesis,) = decoding.decode_hypothesis([hypothesis], True)
        hypothesis.text = hypothesis.text[:2]
        hypothesis = decoding.compute_ctc_timestamps(hypothesis, "all")
        log_probs = torch.nn.functional.one_hot(torch.tensor([path]), blank_id + 1).float().log_softmax(-1)
        (greedy,) = CtcGreedy(blank_id)(log_probs, torch.tensor([frames])).to_list()
        ours = transcript_of(model, "ctc", greedy.tokens, greedy.frame_indices, None, 0.0)
        where = f"sequence {index}: path {path}"
        assert ours.text == hypothesis.text, where
        assert our_words(ours) == nemo_words(hypothesis), where


def test_the_text_loses_the_space_before_a_mark_after_a_lone_word_start():
    """The case the random sequences find, written out: "▁Yes ▁ , ▁I ." is "Yes, I." as NeMo writes it, where
    SentencePiece alone writes "Yes , I."."""
    from pipeline.decoding.recognize import hypothesis_text

    model, nemo_model = models("parakeet-tdt-0.6b")
    processor = model.tokenizer
    ids = [processor.tokenizer.token_to_id(piece) for piece in ("▁Yes", "▁", ",", "▁I", ".")]
    assert processor.ids_to_text(ids) == "Yes , I."
    assert hypothesis_text(processor, ids) == "Yes, I." == \
        nemo_model.decoding.decode_tokens_to_str_with_strip_punctuation(ids)
