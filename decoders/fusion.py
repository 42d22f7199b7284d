"""What every decoder does with the language model it fuses: check it once, and place it once.

A decoder's constructor calls `lm_for_fusion` and keeps what it returns: None when there is nothing to fuse
(no LM, or `lm_weight` 0, so no decoder runs fusion code that adds nothing), else the LM, checked against
the model's labels and moved to the decoder's device. Each call then checks, with `check_lm_device`, that
the input lives where the LM does, instead of moving the LM there: a move on every call would copy the LM,
and would hide from the caller that the decoder was built for another device.
"""

from __future__ import annotations

import torch

from decoders.protocols import LanguageModel


def check_lm_vocab_size(lm: LanguageModel, vocab_size: int) -> None:
    """The LM must cover exactly the model's `vocab_size` non-blank labels."""
    if lm.vocab_size != vocab_size:
        raise ValueError(f"lm.vocab_size must equal the model's {vocab_size} non-blank labels, got {lm.vocab_size}")


def lm_for_fusion(
    lm: LanguageModel | None, lm_weight: float, vocab_size: int | None, device: torch.device | str | None
) -> LanguageModel | None:
    """The LM a decoder fuses, or None when it fuses none (no LM, or `lm_weight` 0).

    A given LM is checked against the model's `vocab_size` non-blank labels whatever the weight (None: the
    decoder learns its labels from each input and checks then, as the CTC decoders do), and moved to `device`
    (None: left where it is).
    """
    if lm is None:
        return None
    if vocab_size is not None:
        check_lm_vocab_size(lm, vocab_size)
    if lm_weight == 0.0:
        return None
    return lm.to(device) if device is not None else lm


def check_lm_device(lm: LanguageModel, device: torch.device, name: str) -> None:
    """The input `name` on `device` must be where the LM is (the decoder moved it there once, if told to)."""
    if not _same_device(lm.device, device):
        raise ValueError(
            f"the LM is on {lm.device} but {name} is on {device}; build the decoder with device={str(device)!r}"
            " to move the LM there once"
        )


def _same_device(first: torch.device, second: torch.device) -> bool:
    first, second = torch.device(first), torch.device(second)
    if first.type != second.type:
        return False
    if first.type == "cuda":  # "cuda" without an index means the current one
        current = torch.cuda.current_device()
        return (first.index if first.index is not None else current) == (
            second.index if second.index is not None else current
        )
    return first.index == second.index or first.index is None or second.index is None
