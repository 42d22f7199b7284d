"""Confidence calibration maps (pipeline/decoding/calibration.py): pool-adjacent-violators on data with known answers,
monotone maps into [0, 1], the JSON round trip, and the refusal of a map fitted for another model or measure."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.decoding.calibration import (
    KINDS,
    Calibration,
    CalibrationMismatch,
    fit_calibration,
    load_calibration,
    measure_of,
    pool_adjacent_violators,
)
from pipeline.decoding.plan import DecodingConfig, plan_decoding
from pipeline.model.nemo_file import ModelFacts

HYBRID = ModelFacts(kind="hybrid_rnnt_ctc", durations=(), sample_rate=16000, max_symbols=10)


def test_pav_pools_each_violation_into_its_mean():
    assert pool_adjacent_violators([1, 3, 2, 4]).tolist() == [1, 2.5, 2.5, 4]
    assert pool_adjacent_violators([3, 2, 1]).tolist() == [2, 2, 2]
    assert pool_adjacent_violators([1, 2, 3]).tolist() == [1, 2, 3]
    assert pool_adjacent_violators([0, 1, 0, 0, 1]).tolist() == pytest.approx([0, 1 / 3, 1 / 3, 1 / 3, 1])
    # weights count as repeated points: [2 (x3), 0] pools to (6 + 0) / 4
    assert pool_adjacent_violators([2, 0], weights=[3, 1]).tolist() == [1.5, 1.5]


def test_pav_equals_brute_force_least_squares_on_small_inputs():
    """Among all non-decreasing sequences on a grid, none is nearer than PAV's (least squares)."""
    rng = np.random.default_rng(0)
    grid = np.linspace(0, 1, 11)
    for _ in range(20):
        values = rng.choice(grid, size=4)
        fitted = pool_adjacent_violators(values)
        assert np.all(np.diff(fitted) >= -1e-12)
        mesh = np.stack(np.meshgrid(*[grid] * 4, indexing="ij"), -1).reshape(-1, 4)
        monotone = mesh[np.all(np.diff(mesh, axis=1) >= 0, axis=1)]
        assert np.sum((fitted - values) ** 2) <= np.min(np.sum((monotone - values) ** 2, axis=1)) + 1e-12


def test_isotonic_map_is_the_share_right_per_confidence():
    """Pairs whose share right rises with confidence map each confidence to its share right, with one
    pseudo-word at the overall share (7 of 12) per step."""
    confidences = [0.1] * 4 + [0.5] * 4 + [0.9] * 4
    correct = [0, 0, 0, 1] + [1, 1, 0, 0] + [1, 1, 1, 1]
    calibration = fit_calibration(confidences, correct, "isotonic")
    share = [(right + 7 / 12) / 5 for right in (1, 2, 4)]
    assert calibration.apply(np.array([0.1, 0.5, 0.9])).tolist() == pytest.approx(share)
    assert calibration.apply(np.array([0.0, 1.0])).tolist() == pytest.approx([share[0], share[2]])  # flat outside
    assert calibration.apply(np.array([0.3])).tolist() == pytest.approx([(share[0] + share[1]) / 2])  # interpolated
    # a violation pools: 0.5 holds fewer right words than 0.1 -> one step for both
    pooled = fit_calibration([0.1, 0.1, 0.5, 0.5], [1, 1, 0, 1], "isotonic")
    assert pooled.apply(np.array([0.1, 0.5])).tolist() == pytest.approx([(3 + 0.75) / 5] * 2)


@pytest.mark.parametrize("kind", KINDS)
def test_maps_are_monotone_and_in_unit_interval(kind):
    rng = np.random.default_rng(1)
    confidences = rng.uniform(size=500) ** 3  # skewed low, as NeMo's tsallis-exp is
    correct = rng.uniform(size=500) < np.sqrt(confidences)
    calibration = fit_calibration(confidences, correct, kind)
    values = np.linspace(-0.5, 1.5, 1001)
    mapped = calibration.apply(values)
    assert np.all(np.diff(mapped) >= 0)
    assert np.all((mapped >= 0) & (mapped <= 1))
    # better calibrated on the data it was fitted on than the raw values
    fitted = calibration.apply(confidences)
    assert np.mean((fitted - correct) ** 2) < np.mean((confidences - correct) ** 2)


def test_platt_recovers_a_known_logistic_map():
    rng = np.random.default_rng(2)
    confidences = rng.uniform(0.01, 0.99, size=20000)
    logit = np.log(confidences / (1 - confidences))
    correct = rng.uniform(size=confidences.size) < 1 / (1 + np.exp(-(2.0 * logit - 1.0)))
    calibration = fit_calibration(confidences, correct, "platt")
    assert (calibration.a, calibration.b) == pytest.approx((2.0, -1.0), abs=0.1)


@pytest.mark.parametrize("kind", KINDS)
def test_json_round_trip(kind, tmp_path):
    calibration = fit_calibration([0.1, 0.2, 0.6, 0.8, 0.9], [0, 1, 0, 1, 1], kind, model_sha256="ab" * 32,
                                  measure="transducer confidence=tsallis-exp-0.33-min")
    path = tmp_path / "calibration.json"
    calibration.save(str(path))
    about = json.loads(path.read_text())
    assert about["kind"] == kind and about["model_sha256"] == "ab" * 32
    loaded = load_calibration(str(path))
    assert loaded == calibration
    values = np.linspace(0, 1, 21)
    assert loaded.apply(values).tolist() == calibration.apply(values).tolist()


def test_a_map_for_another_measure_or_model_is_refused():
    calibration = Calibration("isotonic", "ab" * 32, "transducer confidence=tsallis-exp-0.33-min",
                              x=(0.0, 1.0), y=(0.2, 0.9))
    calibration.check("AB" * 32, "transducer confidence=tsallis-exp-0.33-min")  # the same: no error
    with pytest.raises(CalibrationMismatch, match="fitted for 'transducer confidence=tsallis-exp-0.33-min', not "
                                                  "for this job's 'ctc confidence=tsallis-exp-0.33-min'"):
        calibration.check("ab" * 32, "ctc confidence=tsallis-exp-0.33-min")
    with pytest.raises(CalibrationMismatch, match="fitted for the model with sha256 abab"):
        calibration.check("cd" * 32, "transducer confidence=tsallis-exp-0.33-min")


def test_bad_files_and_maps_are_refused(tmp_path):
    (tmp_path / "not.json").write_text("kind: isotonic\n")
    with pytest.raises(ValueError, match="not a calibration file"):
        load_calibration(str(tmp_path / "not.json"))
    (tmp_path / "decreasing.json").write_text(json.dumps({"kind": "isotonic", "x": [0, 1], "y": [0.9, 0.1],
                                                          "measure": "m"}))
    with pytest.raises(ValueError, match="non-decreasing y"):
        load_calibration(str(tmp_path / "decreasing.json"))
    with pytest.raises(ValueError, match="kind must be one of"):
        fit_calibration([0.5], [1], "histogram")


def test_measure_names_the_head_and_the_confidence_setting():
    plan = plan_decoding(HYBRID, DecodingConfig(strategy="ctc_greedy", confidence=True,
                                                         confidence_method="max_prob", confidence_alpha=1.0))
    assert measure_of(plan) == "ctc confidence=max_prob-1-min"
    plan = plan_decoding(HYBRID, DecodingConfig(confidence=True))
    assert measure_of(plan) == "transducer confidence=tsallis-exp-0.33-min"
    with pytest.raises(ValueError, match="needs confidence on"):
        measure_of(plan_decoding(HYBRID, DecodingConfig()))


def test_decoding_config_refuses_calibration_without_confidence():
    with pytest.raises(ValueError, match="needs decoding.confidence"):
        DecodingConfig(confidence_calibration="calibration.json")
    assert DecodingConfig(confidence=True, confidence_calibration="calibration.json").confidence_calibration
