"""What the driver says when a stage fails for a reason the user must fix: the stage's own message, found in the
text Ray wraps it in, never the wrapper's name alone."""

from __future__ import annotations

from pipeline.graph import stage_error
from pipeline.io import sink
from pipeline.model.actor import ModelLoadError


class RayLikeError(Exception):
    """Ray keeps an actor's exception as text in its own error, with the original as `cause` where it can."""

    def __init__(self, text: str, cause: BaseException | None = None) -> None:
        super().__init__(text)
        self.cause = cause


def test_the_stage_message_is_found_in_rays_text_or_its_cause():
    text = ("ray::MapWorker(MapBatches(FinishAndWrite)).submit() (pid=1, ip=10.0.0.2)\n  File \"x.py\", line 3\n"
            "pipeline.io.sink.PartWriteError: cannot commit a part to s3://bucket/out/part-1.parquet: "
            "PermissionError: Access Denied")
    assert stage_error(RayLikeError(text)) == (
        "cannot commit a part to s3://bucket/out/part-1.parquet: PermissionError: Access Denied")
    load = ModelLoadError("cannot load the model s3://b/m.nemo: OSError: gone")
    assert stage_error(RayLikeError("UserCodeException", cause=load)) == str(load)
    assert stage_error(RayLikeError("ZeroDivisionError: a bug")) is None  # a bug keeps its traceback
    assert stage_error(sink.PartWriteError("x")) == "x"
