"""Shared test setup: marker skips and a quiet, single-threaded torch."""

from __future__ import annotations

import importlib.util

import pytest
import torch

# Tests run many tiny ops; one thread avoids oversubscribing a 2-core machine.
torch.set_num_threads(1)


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _missing(marker: str) -> str | None:
    if marker == "gpu":
        return None if torch.cuda.is_available() else "no CUDA GPU visible"
    if marker == "ray":
        return None if _has_module("ray") else "ray is not installed"
    if marker == "nemo":
        return None if _has_module("nemo") else "nemo_toolkit is not installed"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in ("gpu", "ray", "nemo"):
            if item.get_closest_marker(marker) is not None:
                reason = _missing(marker)
                if reason is not None:
                    item.add_marker(pytest.mark.skip(reason=reason))
