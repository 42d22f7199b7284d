"""CTC decoders against peers: the real n-gram LM (decoders/ngram) and `ctc-beam-decoder` (pyctcdecode's API).

`ctc-beam-decoder` fuses a word-level KenLM; with REFERENCE.md's word trick (every label spelled `▁` + one
symbol, so each token is a word; an ARPA whose words are those symbols; beta 0) it fuses the same token-level
LM. It still differs from `CtcBeamSearch` by design, so texts can differ on close calls:
- it scores a word when the word ends, that is when the next token starts (or at the end of the utterance),
  so every token's LM score reaches the beam one token late and pruning sees different scores;
- it decodes float32 log-probabilities clipped at log(1e-15).
The test therefore asks for mostly identical texts, and, where they differ, that `CtcBeamSearch`'s text is not
worse under the exact model score both searches approximate (CTC forward probability of the text plus the
weighted LM with end of sentence): a difference is then the peer's search error or a near-tie.
"""

from __future__ import annotations

import pytest
import torch

from decoders.ctc.beam import CtcBeamConfig, CtcBeamSearch
from decoders.ctc.greedy import CtcGreedy
from tests.reference.ctc import nemo_symbol, peaky_emissions, random_bigram_arpa, sequence_score, write_token_arpa

VOCAB = 32  # non-blank labels; blank is last (NeMo's layout)
BLANK = VOCAB


@pytest.fixture(scope="module")
def bigram(tmp_path_factory):
    """The same random bigram LM as ARPA files (NeMo's symbols and CJK symbols) and as a table-driven fake."""
    ngrams, table_lm = random_bigram_arpa(VOCAB, seed=3, listed_per_context=8)
    folder = tmp_path_factory.mktemp("ctc_lm")
    write_token_arpa(folder / "nemo.arpa", ngrams, nemo_symbol)
    write_token_arpa(folder / "peer.arpa", ngrams, peer_symbol)
    return folder / "nemo.arpa", folder / "peer.arpa", table_lm


def peer_symbol(token: int) -> str:
    # not chr(i + 100): chr(133) and chr(160) are whitespace to Python's str.split, which the peer's binding uses
    return chr(0x4E00 + token)


def test_real_ngram_lm_gives_what_the_table_gives(bigram):
    lm_module = pytest.importorskip("decoders.ngram.lm")
    nemo_arpa, _, table_lm = bigram
    ngram_lm = lm_module.NgramLm.from_arpa(nemo_arpa, vocab_size=VOCAB)
    log_probs = peaky_emissions(12, 60, VOCAB + 1, BLANK, seed=7)
    lengths = torch.tensor([60, 59, 1, 0, 30, 45, 60, 12, 2, 50, 33, 60])
    config = CtcBeamConfig(beam_size=6, lm_weight=0.8, insertion_bonus=0.3, beam_threshold=20.0)
    for decode_table, decode_real in [
        (CtcBeamSearch(BLANK, config, table_lm), CtcBeamSearch(BLANK, config, ngram_lm)),
        (CtcGreedy(BLANK, table_lm, 0.8), CtcGreedy(BLANK, ngram_lm, 0.8)),
    ]:
        expected = decode_table(log_probs, lengths).to_list()
        got = decode_real(log_probs, lengths).to_list()
        assert [h.tokens for h in got] == [h.tokens for h in expected]
        assert [h.frame_indices for h in got] == [h.frame_indices for h in expected]
        assert [h.score for h in got] == pytest.approx([h.score for h in expected], abs=1e-3)


@pytest.mark.parametrize(("lm_weight", "beam_size", "min_identical"), [(0.0, 8, 38), (0.5, 16, 34), (1.0, 16, 20)])
def test_same_text_as_ctc_beam_decoder_or_a_better_one(bigram, lm_weight, beam_size, min_identical):
    ctc_beam_decoder = pytest.importorskip("ctc_beam_decoder")
    _, peer_arpa, table_lm = bigram
    labels = ["▁" + peer_symbol(i) for i in range(VOCAB)] + [""]  # "" is the blank
    peer = ctc_beam_decoder.BeamSearchDecoder(
        labels, kenlm_model_path=peer_arpa if lm_weight else None, alpha=lm_weight, beta=0.0
    )
    ours = CtcBeamSearch(BLANK, CtcBeamConfig(beam_size=beam_size, lm_weight=lm_weight), table_lm)
    log_probs = peaky_emissions(40, 80, VOCAB + 1, BLANK, seed=1, dtype=torch.float64)
    hypotheses = ours(log_probs, torch.full((40,), 80)).to_list()
    identical, ours_worse = 0, []
    for b, hypothesis in enumerate(hypotheses):
        beams = peer.decode_beams(log_probs[b].numpy(), beam_width=beam_size, beam_prune_logp=-1e9, token_min_logp=-1e9)
        peer_tokens = [ord(word) - 0x4E00 for word in beams[0][0].split(" ") if word]
        if peer_tokens == hypothesis.tokens:
            identical += 1
            continue
        ours_score = sequence_score(log_probs[b], hypothesis.tokens, BLANK, table_lm, lm_weight)
        peer_score = sequence_score(log_probs[b], peer_tokens, BLANK, table_lm, lm_weight)
        if ours_score < peer_score - 1e-3:
            ours_worse.append((b, peer_score - ours_score))
    assert identical >= min_identical
    # where the two disagree, the peer's text is rarely the better one (both searches are beam-limited)
    assert len(ours_worse) <= (40 - identical) // 4, ours_worse
