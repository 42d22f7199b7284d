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


@pytest.mark.parametrize("loss_name", ["warprnnt_numba", "tdt"])
def test_the_swap_keeps_the_models_loss_kind_and_settings(loss_name):
    from types import SimpleNamespace

    from nemo.collections.asr.losses.rnnt import RNNTLoss
    from rnnt_loss_torch import RNNTLossTorch, TDTLossTorch, use_torch_rnnt_loss

    kwargs = {"durations": [0, 1, 2], "sigma": 0.02} if loss_name == "tdt" else None
    model = SimpleNamespace(loss=RNNTLoss(num_classes=6, reduction="mean_batch", loss_name=loss_name,
                                          loss_kwargs=kwargs))
    use_torch_rnnt_loss(model)
    swapped = model.loss._loss
    if loss_name == "tdt":
        assert isinstance(swapped, TDTLossTorch)
        assert (swapped.blank, swapped.durations, swapped.sigma) == (6, [0, 1, 2], 0.02)
    else:
        assert isinstance(swapped, RNNTLossTorch) and swapped.blank == 6


def test_the_swap_refuses_a_tdt_loss_with_omega():
    from types import SimpleNamespace

    from nemo.collections.asr.losses.rnnt import RNNTLoss
    from rnnt_loss_torch import use_torch_rnnt_loss

    model = SimpleNamespace(loss=RNNTLoss(num_classes=6, loss_name="tdt",
                                          loss_kwargs={"durations": [0, 1, 2], "omega": 0.1}))
    with pytest.raises(ValueError, match="omega"):
        use_torch_rnnt_loss(model)
