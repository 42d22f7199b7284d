"""WER and CER as every report gives them: normalised and as written, saying which is which.

A cased, punctuated model (parakeet's: "Call Rachel at five, please.") scored against lower-case references without
punctuation ("call rachel at five please") is wrong on every capital and every comma; scored against references
written as it writes, it is still wrong on "5" against "five". So each figure comes twice:

- **normalised** (`wer`, `cer`): both texts put in their plain form (`pipeline/lm/text.py::plain_text`:
  lowercased, numbers spelled out in words, punctuation and symbols removed): the words alone. The decisions of the
  jobs (the LM and boost weights `jobs/lm_bias.py` chooses, its sign test, the pseudo-labelling report's curve)
  use it, as the Open ASR leaderboard ranks models by a normalised WER.
- **as written** (`written_wer`, `written_cer`): the texts exactly as the model wrote them and the references
  give them (jiwer on the raw strings): where references are written as the model writes, this also counts case
  and punctuation errors.

For a lower-case model without punctuation and references written the same way, the two agree but for the
apostrophe ("don't" is "dont" in both texts once normalised: the same word either way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.lm.text import PLAIN_TEXT_RULES, plain_text

NORMALISED = f"normalised: {PLAIN_TEXT_RULES}, in both texts"
WRITTEN = "as written: the transcripts and references exactly as they are"


@dataclass(frozen=True)
class ErrorRates:
    wer: float  # normalised
    cer: float  # normalised
    written_wer: float
    written_cer: float
    errors: tuple[int, ...]  # normalised word errors (substitutions + deletions + insertions) of each utterance


def error_rates(references: Sequence[str], hypotheses: Sequence[str]) -> ErrorRates:
    """WER and CER over the whole set, normalised and as written, and each utterance's normalised word errors."""
    import jiwer

    references, hypotheses = [r or "" for r in references], [h or "" for h in hypotheses]
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    plain_references, plain_hypotheses = [plain_text(r) for r in references], [plain_text(h) for h in hypotheses]
    words = jiwer.process_words(plain_references, plain_hypotheses)
    errors = tuple(sum((c.ref_end_idx - c.ref_start_idx) if c.type in ("substitute", "delete")
                       else (c.hyp_end_idx - c.hyp_start_idx) if c.type == "insert" else 0 for c in alignment)
                   for alignment in words.alignments)
    return ErrorRates(wer=words.wer, cer=jiwer.cer(plain_references, plain_hypotheses),
                      written_wer=jiwer.wer(references, hypotheses), written_cer=jiwer.cer(references, hypotheses),
                      errors=errors)


def rates_text(rates: dict | ErrorRates, what: str = "WER") -> str:
    """"12.5% (as written 40.0%)": a rate normalised, then as written (`what` "WER" or "CER"); "-" where unknown."""
    key = what.lower()
    if isinstance(rates, ErrorRates):
        rates = {"wer": rates.wer, "cer": rates.cer, "written_wer": rates.written_wer,
                 "written_cer": rates.written_cer}
    if not rates or rates.get(key) is None:
        return "-"
    written = rates.get(f"written_{key}")
    return f"{rates[key]:.1%}" + (f" (as written {written:.1%})" if written is not None else "")


__all__ = ["NORMALISED", "WRITTEN", "ErrorRates", "error_rates", "rates_text"]
