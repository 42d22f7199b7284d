"""What the benchmark scripts share: timing runs side by side, and the machine a figure was taken on."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch


def interleaved_ms(runs: Mapping[str, Callable[[], Any]], repeats: int, device: str = "cpu",
                   warmup: bool = True) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Wall times in ms of each run over `repeats` rounds, and what each run returned the first time.

    A round calls every run once, in an order that rotates by one each round, so that a slow spell on a shared
    machine falls on all of them alike. With `warmup`, one untimed round comes first (compilation, caches,
    CUDA graph capture). On CUDA each call is timed between two synchronisations.
    """
    names = list(runs)
    outputs: dict[str, Any] = {}
    if warmup:
        outputs = {name: runs[name]() for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            output = runs[name]()
            if device == "cuda":
                torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) * 1000)
            outputs.setdefault(name, output)
    return times, outputs


def machine(device: str = "cpu") -> dict[str, Any]:
    """Where the figures come from, for the JSON line every benchmark ends with."""
    about = {"device": device, "machine": platform.machine(), "processor": platform.processor(),
             "cpus": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
             "python": platform.python_version()}
    if device == "cuda":
        about["gpu"] = torch.cuda.get_device_name()
    return about
