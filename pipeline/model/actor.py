"""The model a stage actor works with: loaded in a thread started at once (`BackgroundLoad`), the whole NeMo model
(`load_model`, the ASR stage) or only what the writers need from the `.nemo` (`load_layout`), and the confidence
calibration map checked against that model file (`load_checked_calibration`). A model that cannot be loaded is a
`ModelLoadError`, which stops the job with its cause (`pipeline/graph.py`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from pipeline.config import ModelConfig
from pipeline.decoding import Calibration, DecodingPlan, load_calibration, measure_of
from pipeline.io import cached_sha256, fetch_file, models_dir
from pipeline.io.redact import redact
from pipeline.model.nemo import AsrModel, load_asr_model
from pipeline.model.nemo_file import LayoutUnavailable, ModelLayout, read_model_layout


def fetch_model(model: ModelConfig) -> Path:
    """The model's file on this node (fetched once per node into the cache's models store), its sha256 checked
    where the config pins one."""
    return fetch_file(model.uri, sha256=model.sha256, cache_dir=models_dir(model.cache_dir))


def load_model(model: ModelConfig, device: str) -> AsrModel:
    return load_asr_model(model.uri, sha256=model.sha256, cache_dir=models_dir(model.cache_dir), device=device)


def load_layout(model: ModelConfig, device: str = "cpu") -> AsrModel | ModelLayout:
    """The model's tokenizer, frame timing and head layout, read from the `.nemo` file without NeMo; the whole
    model only where the file holds something `read_model_layout` does not read (another tokenizer type)."""
    path = fetch_model(model)
    try:
        return read_model_layout(path)
    except LayoutUnavailable:
        return load_model(model, device)


def model_sha256(model: ModelConfig) -> str:
    """The sha256 of the model's file: the pinned one, else the (cached) file's, hashed once per version of the file
    on this node (`cached_sha256`): every actor of a job asks, and a 2.4 GB model takes seconds to hash."""
    if model.sha256:
        return model.sha256.lower()
    return cached_sha256(fetch_model(model), models_dir(model.cache_dir))


def load_checked_calibration(model: ModelConfig, plan: DecodingPlan) -> Calibration | None:
    """The plan's confidence calibration map (None where it has none), refused (`CalibrationMismatch`) if it was
    fitted for another model file or another measure."""
    uri = plan.config.confidence_calibration
    if not uri:
        return None
    calibration = load_calibration(uri)
    calibration.check(model_sha256(model), measure_of(plan))
    return calibration


class ModelLoadError(RuntimeError):
    """The stage's model could not be loaded: no row can be decoded, so the job stops and says why."""


class BackgroundLoad:
    """Loads a model in a thread started at once; `get()` waits for it and raises `ModelLoadError` naming
    `name` and the cause if loading failed.

    Stages start loading in `__init__`, so the actors of every stage load their models at the same time as
    the first audio is fetched, instead of one after the other as the first batch reaches each (which made a
    short job wait for two model loads in a row); and `__init__` itself returns at once.
    """

    def __init__(self, load: Callable[[], AsrModel], name: str) -> None:
        self.name = name
        self._result: AsrModel | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(load,), name="load-model", daemon=True)
        self._thread.start()

    def _run(self, load: Callable[[], AsrModel]) -> None:
        try:
            self._result = load()
        except BaseException as error:  # re-raised in the stage's thread by get()
            self._error = error

    def get(self) -> AsrModel:
        self._thread.join()
        if self._error is not None:
            raise ModelLoadError(redact(f"cannot load the model {self.name}: {type(self._error).__name__}: "
                                        f"{self._error}")) from self._error
        assert self._result is not None
        return self._result


__all__ = ["BackgroundLoad", "ModelLoadError", "fetch_model", "load_checked_calibration", "load_layout", "load_model",
           "model_sha256"]
