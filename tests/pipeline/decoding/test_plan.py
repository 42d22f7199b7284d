"""The decoding plan: each decision made once, from the model's facts and the config, for every strategy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.decoding.plan import (
    STRATEGIES,
    DecodingConfig,
    DecodingError,
    describe,
    plan_decoding,
    strategies_for,
)
from pipeline.model.nemo_file import ModelFacts

REPOSITORY = Path(__file__).resolve().parents[3]

RNNT = ModelFacts(kind="rnnt", durations=(), sample_rate=16000, max_symbols=5)
TDT_CTC = ModelFacts(kind="hybrid_tdt_ctc", durations=(0, 1, 2, 3, 4), sample_rate=16000, max_symbols=10)
CTC = ModelFacts(kind="ctc", durations=(), sample_rate=16000, max_symbols=10)
HYBRID = ModelFacts(kind="hybrid_rnnt_ctc", durations=(), sample_rate=16000, max_symbols=10)


def test_every_strategy_plans_the_head_span_kind_and_stage_of_its_table_row():
    expected = {  # strategy: (head, span kind, writer searches) on the hybrid RNN-T + CTC model
        "greedy": ("transducer", "rnnt", False), "wind_greedy": ("transducer", "rnnt", False),
        "alsd": ("transducer", "rnnt", False), "aes": ("transducer", "rnnt", False),
        "aes_skip": ("transducer", "rnnt", False), "wind_beam": ("transducer", "rnnt", False),
        "ctc_greedy": ("ctc", "ctc", False),
        "ctc_beam": ("ctc", "ctc", True)}
    assert set(expected) == set(STRATEGIES)
    for name, (head, span_kind, writer) in expected.items():
        plan = plan_decoding(HYBRID, DecodingConfig(strategy=name))
        assert (plan.head, plan.span_kind, plan.writer_searches) == (head, span_kind, writer), name
    assert plan_decoding(TDT_CTC, DecodingConfig(strategy="alsd")).span_kind == "tdt"
    assert plan_decoding(CTC, DecodingConfig()).head == "ctc"  # plain greedy of a CTC-only model is CTC greedy


def test_confidence_is_planned_for_every_strategy_and_blank_steps_only_for_greedy():
    for name in strategies_for(HYBRID):
        config = DecodingConfig(strategy=name, confidence=True)
        assert plan_decoding(HYBRID, config).confidence.method_cfg.entropy_type == "tsallis"
        folded = DecodingConfig(strategy=name, confidence=True, confidence_exclude_blank=False)
        if STRATEGIES[name].beam:
            with pytest.raises(DecodingError, match="step that emits it in the chosen hypothesis"):
                plan_decoding(HYBRID, folded)
        else:
            assert not plan_decoding(HYBRID, folded).confidence.exclude_blank
    assert plan_decoding(HYBRID, DecodingConfig()).confidence is None
    with pytest.raises(ValueError, match="confidence_aggregation"):
        DecodingConfig(confidence=True, confidence_aggregation="median")


@pytest.mark.parametrize(("facts", "strategy", "message"), [
    (CTC, "alsd", "'alsd' needs a transducer head; m.nemo \\(ctc\\) has none \\(use greedy, ctc_greedy, ctc_beam\\)"),
    (RNNT, "ctc_beam",
     "needs a CTC head; m.nemo \\(rnnt\\) has none \\(use greedy, wind_greedy, alsd, aes, aes_skip, wind_beam\\)"),
    (TDT_CTC, "wind_beam", "'wind_beam' supports RNN-T only; m.nemo is TDT \\(use greedy, wind_greedy, alsd, aes\\)"),
])
def test_a_strategy_the_model_cannot_run_is_refused_with_what_to_use(facts, strategy, message):
    with pytest.raises(DecodingError, match=message):
        plan_decoding(facts, DecodingConfig(strategy=strategy), model_name="m.nemo")
    for other in strategies_for(facts):  # and everything suggested does plan
        plan_decoding(facts, DecodingConfig(strategy=other))


def test_defaults_are_resolved_in_the_plan():
    plan = plan_decoding(RNNT, DecodingConfig(strategy="alsd"), device="cpu")
    assert plan.max_symbols == 5 and plan.window_size == 1 and not plan.use_cuda_graphs
    assert plan_decoding(RNNT, DecodingConfig(max_symbols=2)).max_symbols == 2
    assert plan_decoding(RNNT, DecodingConfig(strategy="wind_beam", window_size=6)).window_size == 6
    assert plan_decoding(RNNT, DecodingConfig(), device="cuda").use_cuda_graphs
    assert not plan_decoding(RNNT, DecodingConfig(use_cuda_graphs=False), device="cuda").use_cuda_graphs
    assert plan_decoding(HYBRID, DecodingConfig(strategy="ctc_beam", ctc_collapse_threshold="weak")
                         ).collapse_threshold == "weak"
    assert plan_decoding(HYBRID, DecodingConfig(strategy="greedy")).collapse_threshold is None  # no writer search


def test_the_lm_is_fused_exactly_when_a_uri_and_a_weight_are_given():
    assert not plan_decoding(RNNT, DecodingConfig()).fuses_lm
    fused = plan_decoding(RNNT, DecodingConfig(lm_uri="x.lm", lm_weight=0.4))
    assert fused.fuses_lm and fused.lm_weight == 0.4
    with pytest.raises(ValueError, match="needs decoding.lm_weight > 0"):
        DecodingConfig(lm_uri="x.lm")
    with pytest.raises(ValueError, match="needs decoding.lm_uri"):
        DecodingConfig(lm_weight=0.4)


def test_advice_is_part_of_the_plan():
    noted = plan_decoding(HYBRID, DecodingConfig(strategy="ctc_beam", lm_uri="x.lm", lm_weight=1.0))
    assert len(noted.advice) == 1 and "--ctc-insertion-bonus" in noted.advice[0]
    assert plan_decoding(HYBRID, DecodingConfig(strategy="ctc_beam", lm_uri="x.lm", lm_weight=1.0,
                                                ctc_insertion_bonus=2.0)).advice == ()


def test_the_decoding_column_names_what_the_strategy_reads_and_nothing_else():
    assert describe(DecodingConfig(strategy="greedy", beam_size=9, window_size=3)) == "greedy"
    assert describe(DecodingConfig(strategy="wind_beam", beam_size=2, window_size=3, max_symbols=4)) == (
        "wind_beam beam_size=2 window_size=3 max_symbols=4")
    assert describe(DecodingConfig(strategy="ctc_greedy", max_symbols=4)) == "ctc_greedy"
    assert describe(DecodingConfig(strategy="ctc_beam", ctc_beam_threshold=10, pruning="early")) == (
        "ctc_beam beam_size=4 collapse=0.9 ctc_beam_threshold=10")
    assert describe(DecodingConfig(strategy="aes", lm_uri="x.lm", lm_weight=0.5, pruning="early")) == (
        "aes beam_size=4 lm=x.lm lm_weight=0.5 pruning=early")


def test_the_plan_crosses_process_boundaries():
    import pickle

    plan = plan_decoding(TDT_CTC, DecodingConfig(strategy="ctc_beam", lm_uri="x.lm", lm_weight=1.0), "cuda")
    assert pickle.loads(pickle.dumps(plan)) == plan  # Ray ships it to every actor


def test_docs_table_lists_every_strategy_as_the_plan_has_it():
    text = (REPOSITORY / "docs" / "decoding.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip(" `") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[0] in STRATEGIES:
            rows[cells[0]] = cells[1:5]
    assert set(rows) == set(STRATEGIES)
    for name, strategy in STRATEGIES.items():
        head = strategy.head or "the model's first"
        assert rows[name] == [head, "yes" if strategy.beam else "no", "yes" if strategy.takes_tdt else "no",
                              "writer" if strategy.writer_searches else "ASR"], name


def test_no_module_outside_the_plan_compares_strategy_names():
    names = "|".join(STRATEGIES)
    comparison = re.compile(rf"""(==|!=|\bin)\s*\(?\s*["']({names})["']|["']({names})["']\s*(==|!=)|"""
                            rf"""strategy\s*(==|!=|in\b)|\.strategy\.startswith""")
    offenders = []
    for folder in ("pipeline", "jobs", "decoders"):
        for path in (REPOSITORY / folder).rglob("*.py"):
            if path.relative_to(REPOSITORY).as_posix() == "pipeline/decoding/plan.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if comparison.search(line):
                    offenders.append(f"{path.relative_to(REPOSITORY)}:{number}: {line.strip()}")
    assert offenders == []
