"""The demo-model recipe's CPU training losses (recipes/demo_model/rnnt_loss_torch.py) against NeMo's: the RNN-T
loss against warprnnt_numba, the TDT loss against NeMo's pure-PyTorch TDT reference; values and gradients."""

from __future__ import annotations

import sys

import pytest

from pipeline.config import REPOSITORY

pytestmark = pytest.mark.nemo

sys.path.insert(0, str(REPOSITORY / "recipes" / "demo_model"))  # the recipe's scripts import each other by name


@pytest.mark.parametrize("loss", ["rnnt", "tdt"])
def test_torch_loss_matches_nemo(loss):
    import check_rnnt_loss

    loss_error, grad_error = getattr(check_rnnt_loss, f"compare_{loss}")()
    assert loss_error < 1e-4 and grad_error < 1e-4


def test_tdt_loss_refuses_durations_it_cannot_train():
    from rnnt_loss_torch import TDTLossTorch

    for durations in ([], [0], [-1, 1]):
        with pytest.raises(ValueError, match="durations"):
            TDTLossTorch(blank=3, durations=durations)
