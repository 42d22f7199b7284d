"""`train.transfer_weights`: an RNN-T model's weights initialize its TDT variant, whose joint has more outputs."""

from __future__ import annotations

import sys

import pytest
import torch

from pipeline.config import REPOSITORY

pytestmark = pytest.mark.nemo

sys.path.insert(0, str(REPOSITORY / "recipes" / "demo_model"))


def test_extra_output_rows_keep_their_init_and_everything_else_is_copied():
    from train import transfer_weights

    torch.manual_seed(0)
    source = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    target = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 5))  # 2 more outputs
    fresh = {name: value.clone() for name, value in target.state_dict().items()}
    extended = transfer_weights(target, source.state_dict())
    assert extended == ["2.weight (3, 6) -> (5, 6)", "2.bias (3,) -> (5,)"]
    assert torch.equal(target[0].weight, source[0].weight) and torch.equal(target[0].bias, source[0].bias)
    assert torch.equal(target[2].weight[:3], source[2].weight) and torch.equal(target[2].bias[:3], source[2].bias)
    assert torch.equal(target[2].weight[3:], fresh["2.weight"][3:])
    assert torch.equal(target[2].bias[3:], fresh["2.bias"][3:])


def test_other_mismatches_are_errors():
    from train import transfer_weights

    with pytest.raises(ValueError, match="cannot initialize"):
        transfer_weights(torch.nn.Linear(4, 3), torch.nn.Linear(5, 3).state_dict())  # a different input width
    with pytest.raises(ValueError, match="cannot initialize"):
        transfer_weights(torch.nn.Linear(4, 3), torch.nn.Linear(4, 5).state_dict())  # fewer outputs than the source
    with pytest.raises(ValueError, match="missing"):
        transfer_weights(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 3)),
                         torch.nn.Sequential(torch.nn.Linear(4, 3)).state_dict())
