"""Per-model calibration of word confidence: a monotone map from a measure's value to P(the word is right).

NeMo's measures (decoders/confidence.py) rank words well but are not probabilities: on the bundled model the
default measure gives most right words less than 0.5. A map fitted on a held-out set with references, from
pairs (word confidence, word right), fixes that and keeps the ranking (bar ties inside an isotonic step):

- `isotonic`: isotonic regression by pool-adjacent-violators (the step function of least squared error that
  never decreases), each step's share right then shrunk by one pseudo-word towards the overall share (so that
  no step says 0 or 1 from a handful of words), applied by linear interpolation between the fitted steps: a
  continuous, monotone map.
- `platt`: Platt (temperature) scaling, `sigmoid(a * logit(c) + b)`, fitted by logistic regression (Newton).

`benchmarks/confidence.py` compares both on the bundled test set and writes a map fitted on dev
(`--write-calibration`); `isotonic` is the default: on the default measure of both heads it has the lower
ECE and the higher NCE there (docs/benchmarks.md). A map is fitted for one model file and one measure (head,
measure, alpha, aggregation): both are stored in its JSON and `Calibration.check` refuses a map for another,
with both named. The job's writer stage applies it (`decoding.confidence_calibration`).

File format (JSON): `{"kind": "isotonic", "x": [...], "y": [...], "model_sha256": "...", "measure":
"transducer confidence=tsallis-exp-0.33-min"}`; `platt` stores `"a"` and `"b"` instead of x and y.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    from pipeline.decoding.plan import DecodingPlan

Kind = Literal["isotonic", "platt"]
KINDS: tuple[Kind, ...] = ("isotonic", "platt")
DEFAULT_KIND: Kind = "isotonic"
_EPSILON = 1e-6  # logit(c) of a confidence of exactly 0 or 1 stays finite
PRIOR_WORDS = 1.0  # isotonic: pseudo-words per step at the overall share right (docs/benchmarks.md)


class CalibrationMismatch(ValueError):
    """A calibration map fitted for another model or measure than the one it is applied to."""


@dataclass(frozen=True)
class Calibration:
    kind: Kind
    model_sha256: str | None
    measure: str  # `measure_of(plan)`: the head and the confidence setting the map was fitted for
    x: tuple[float, ...] = ()  # isotonic: increasing knots ...
    y: tuple[float, ...] = ()  # ... and their non-decreasing values in [0, 1]
    a: float = 1.0  # platt: sigmoid(a * logit(c) + b)
    b: float = 0.0
    fitted_on: dict = field(default_factory=dict)  # where the pairs came from, for people (words, share right)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"calibration kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "isotonic":
            x, y = np.asarray(self.x, dtype=np.float64), np.asarray(self.y, dtype=np.float64)
            if len(x) == 0 or len(x) != len(y):
                raise ValueError(f"an isotonic calibration needs as many y as x (at least one), got {len(x)} x "
                                 f"and {len(y)} y")
            if np.any(np.diff(x) <= 0) or np.any(np.diff(y) < 0) or not np.all((y >= 0) & (y <= 1)):
                raise ValueError("an isotonic calibration needs increasing x and non-decreasing y in [0, 1]")
        elif not (np.isfinite(self.a) and np.isfinite(self.b) and self.a >= 0):
            raise ValueError(f"a platt calibration needs finite a >= 0 and b, got a={self.a}, b={self.b}")

    def apply(self, values: np.ndarray) -> np.ndarray:
        """Confidences (any shape) -> calibrated confidences in [0, 1], monotone in the input."""
        values = np.clip(np.asarray(values, dtype=np.float64), 0.0, 1.0)
        if self.kind == "isotonic":
            mapped = np.interp(values, self.x, self.y)  # flat beyond the first and last knots
        else:
            mapped = 0.5 * (1.0 + np.tanh(0.5 * (self.a * _logit(values) + self.b)))  # the sigmoid
        return np.clip(mapped, 0.0, 1.0)

    def apply_words(self, word_confidence: Sequence[float], aggregation: str) -> tuple[list[float], float | None]:
        """One utterance's word confidences -> the calibrated ones and the utterance's confidence recomputed
        from them with the same `aggregation` (min, max, mean, prod) as the uncalibrated one."""
        calibrated = self.apply(np.asarray(word_confidence, dtype=np.float64))
        if len(calibrated) == 0:
            return [], None
        reduce = {"min": np.min, "max": np.max, "mean": np.mean, "prod": np.prod}[aggregation]
        return calibrated.tolist(), float(reduce(calibrated))

    def check(self, model_sha256: str | None, measure: str) -> None:
        """Raise `CalibrationMismatch` unless this map was fitted for this model file and measure."""
        if measure != self.measure:
            raise CalibrationMismatch(f"the confidence calibration was fitted for {self.measure!r}, not for this "
                                      f"job's {measure!r}: fit one for this setting (python benchmarks/"
                                      f"confidence.py --write-calibration) or change the confidence flags")
        if self.model_sha256 and model_sha256 and self.model_sha256.lower() != model_sha256.lower():
            raise CalibrationMismatch(f"the confidence calibration was fitted for the model with sha256 "
                                      f"{self.model_sha256}, not this job's {model_sha256}: a map belongs to one "
                                      f"model")

    def to_json(self) -> dict:
        about = {"kind": self.kind}
        about |= {"x": list(self.x), "y": list(self.y)} if self.kind == "isotonic" else {"a": self.a, "b": self.b}
        return about | {"model_sha256": self.model_sha256, "measure": self.measure, "fitted_on": self.fitted_on}

    @classmethod
    def from_json(cls, about: dict) -> Calibration:
        for key in ("kind", "measure"):
            if key not in about:
                raise ValueError(f"a calibration file needs {key!r}; it has {', '.join(sorted(about))}")
        return cls(kind=about["kind"], model_sha256=about.get("model_sha256"), measure=about["measure"],
                   x=tuple(float(v) for v in about.get("x", ())), y=tuple(float(v) for v in about.get("y", ())),
                   a=float(about.get("a", 1.0)), b=float(about.get("b", 0.0)), fitted_on=about.get("fitted_on", {}))

    def save(self, path: str) -> None:
        import fsspec

        with fsspec.open(path, "w") as handle:
            json.dump(self.to_json(), handle, indent=1)
            handle.write("\n")


def load_calibration(path_or_uri: str) -> Calibration:
    """A calibration map from a local path or an fsspec URI (s3://, gs://, ...)."""
    import fsspec

    with fsspec.open(path_or_uri, "r") as handle:
        try:
            about = json.load(handle)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path_or_uri} is not a calibration file (JSON): {error}") from None
    try:
        return Calibration.from_json(about)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path_or_uri}: {error}") from None


def measure_of(plan: DecodingPlan) -> str:
    """What a map is fitted for: the head decoded and the confidence part of the `decoding` column
    (`transducer confidence=tsallis-exp-0.33-min`)."""
    setting = [part for part in plan.description.split() if part.startswith("confidence=")]
    if not setting:
        raise ValueError("confidence calibration needs confidence on (--confidence)")
    return f"{plan.head} {setting[0]}"


# --- fitting -----------------------------------------------------------------------------------------------
def pool_adjacent_violators(values: Sequence[float], weights: Sequence[float] | None = None) -> np.ndarray:
    """The non-decreasing sequence nearest `values` in weighted least squares (Ayer et al., 1955): merge each
    block that is below the one before it into a block holding their weighted mean, until none is."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.ones_like(values) if weights is None else np.asarray(weights, dtype=np.float64)
    means, totals, sizes = [], [], []  # the blocks so far: weighted mean, weight, count
    for value, weight in zip(values, weights):
        means.append(value), totals.append(weight), sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            weight = totals[-2] + totals[-1]
            means[-2] = (means[-2] * totals[-2] + means[-1] * totals[-1]) / weight
            totals[-2], sizes[-2] = weight, sizes[-2] + sizes[-1]
            del means[-1], totals[-1], sizes[-1]
    return np.repeat(means, sizes)


def _logit(values: np.ndarray) -> np.ndarray:
    values = np.clip(values, _EPSILON, 1.0 - _EPSILON)
    return np.log(values) - np.log1p(-values)


def _fit_isotonic(confidences: np.ndarray, correct: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    # one point per distinct confidence, weighted by its count: equal inputs must map to one value
    knots, inverse, counts = np.unique(confidences, return_inverse=True, return_counts=True)
    means = np.bincount(inverse, weights=correct) / counts
    fitted = pool_adjacent_violators(means, counts)
    # each block's share right with PRIOR_WORDS pseudo-words at the overall share: a block of a few words, all
    # right or all wrong, must not say 0 or 1 (one wrong word at 1.0 costs NCE without bound)
    _, block = np.unique(fitted, return_inverse=True)
    words, right = np.bincount(block, weights=counts), np.bincount(block, weights=counts * means)
    shrunk = (right + PRIOR_WORDS * correct.mean()) / (words + PRIOR_WORDS)
    fitted = pool_adjacent_violators(shrunk[block], counts)  # shrinking can reorder two small blocks
    keep = np.ones(len(knots), dtype=bool)  # inside a flat step only its ends matter for interpolation
    keep[1:-1] = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    return tuple(knots[keep].tolist()), tuple(np.clip(fitted[keep], 0.0, 1.0).tolist())


def _fit_platt(confidences: np.ndarray, correct: np.ndarray, steps: int = 100) -> tuple[float, float]:
    """Logistic regression of `correct` on logit(confidence): Newton's method from the constant model (a = 0,
    b = logit of the share right), each step halved until the loss falls (a tiny ridge keeps it finite on
    separable data)."""
    features = np.stack([_logit(confidences), np.ones_like(confidences)], axis=1)  # [N, 2]
    ridge = 1e-6

    def loss(weights: np.ndarray) -> float:
        margin = features @ weights
        return float(np.sum(np.logaddexp(0.0, margin) - correct * margin) + 0.5 * ridge * weights @ weights)

    weights = np.array([0.0, float(_logit(np.array([correct.mean()]))[0])])
    current = loss(weights)
    for _ in range(steps):
        p = 0.5 * (1.0 + np.tanh(0.5 * (features @ weights)))  # the sigmoid, without overflow
        gradient = features.T @ (p - correct) + ridge * weights
        hessian = (features * (p * (1 - p))[:, None]).T @ features + ridge * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        scale = 1.0
        while scale > 1e-8 and loss(weights - scale * step) > current:
            scale /= 2
        weights, previous = weights - scale * step, current
        current = loss(weights)
        if previous - current < 1e-12 * max(1.0, abs(current)):
            break
    return max(float(weights[0]), 0.0), float(weights[1])


def fit_calibration(confidences: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray,
                    kind: Kind = DEFAULT_KIND, model_sha256: str | None = None, measure: str = "") -> Calibration:
    """(word confidence, word right) pairs from a held-out set -> a `Calibration` of `kind`."""
    confidences = np.clip(np.asarray(confidences, dtype=np.float64).ravel(), 0.0, 1.0)
    correct = np.asarray(correct, dtype=np.float64).ravel()
    if len(confidences) != len(correct) or len(confidences) == 0:
        raise ValueError(f"fit_calibration needs as many labels as confidences (at least one), got "
                         f"{len(confidences)} and {len(correct)}")
    fitted_on = {"words": int(len(correct)), "right": float(correct.mean())}
    if kind == "isotonic":
        x, y = _fit_isotonic(confidences, correct)
        return Calibration("isotonic", model_sha256, measure, x=x, y=y, fitted_on=fitted_on)
    if kind == "platt":
        a, b = _fit_platt(confidences, correct)
        return Calibration("platt", model_sha256, measure, a=a, b=b, fitted_on=fitted_on)
    raise ValueError(f"calibration kind must be one of {', '.join(KINDS)}, got {kind!r}")
