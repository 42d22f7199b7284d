"""Per-domain LM biasing in one command: domain text (or a phrase list, or both) in; a token LM, its weight (and the
phrases' boost weight) tuned on a dev set, a WER report, and (with --manifest) the domain corpus transcribed with
the chosen setting.

    python jobs/lm_bias.py --text samples/domain/lm_text.txt --dev samples/domain/dev.json \\
        --test samples/domain/test.json --output out/bias
    python jobs/lm_bias.py ... --phrases contacts.txt ...   # and boost these names: the boost weight tuned too
    python jobs/lm_bias.py --phrases contacts.txt --dev ... --output ...   # a phrase list alone, no LM
    python jobs/lm_bias.py ... --manifest 's3://bucket/domain/*.json' --output s3://bucket/bias   # and transcribe

Steps:
1. Checks before any cluster work: the text files exist and hold lines the model's tokenizer can encode, the
   phrase list's every line is a phrase the tokenizer can write (`pipeline/preflight.py::phrase_list_problem`, as
   `jobs/transcribe.py --phrases` checks it), the dev (and test) manifests hold references (`text`) and readable
   rows, the model can run the strategies asked.
2. With --text, the text is normalised as the model's training text was (`pipeline/lm/text.py`: case, numbers
   spelled out, punctuation the tokenizer lacks removed), and a token n-gram LM is built from it with
   `pipeline/lm/build.py` (as `jobs/build_lm.py` builds one): each order of --orders is built on 9 lines in 10 and
   scored on the 10th; the order with the lowest held-out perplexity is rebuilt on every line. Written to
   OUTPUT/lm/domain.lm with lm.json (how it was made).
3. Each strategy of --strategies (default: greedy, alsd, ctc_greedy and ctc_beam where the model has the head),
   each beam search at each of --beam-sizes (default 4), is tuned in its own Ray task (`pipeline/lm/tuning.py`):
   the dev set is encoded once and decoded once per LM weight (and CTC beam insertion bonus) tried; the test
   set, if given, is decoded with the strategy's baseline and chosen setting. With --phrases, the boost weight
   is searched next, at the LM setting chosen (`pipeline/lm/tuning.py::BOOST_WEIGHTS`; without --text, alone).
   Trials are kept in OUTPUT/tuning/, so a rerun decodes only what it had not.
4. The strategy with the lowest tuned dev WER (ties: the first in --strategies) is chosen; where no LM setting
   beats the same strategy without it on dev, the job says so and that strategy runs without the LM; where no
   boost weight beats the LM setting without boosting, it runs without the phrases.
   OUTPUT/decoding.yaml holds the choice, as `jobs/transcribe.py --config` reads it; OUTPUT/report.md,
   report.json, dev_wer.png (LM weight) and dev_wer_boost.png (boost weight) report every strategy.
5. With --manifest, the corpus is transcribed with the choice into OUTPUT/transcripts/ (exactly once, as
   `jobs/transcribe.py` writes it; a rerun finishes what is missing).

The steps are `pipeline/lm/bias.py`'s; the report, `pipeline/reports/lm_bias.py`.

Ray: RAY_ADDRESS or --ray-address, else a private local Ray (`ray job submit -- python jobs/lm_bias.py ...` on a
cluster).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.io.redact import redact  # noqa: E402
from pipeline.lm import BiasConfig, BiasError, prepare_bias, print_line, run_bias  # noqa: E402
from pipeline.preflight import PreflightError  # noqa: E402
from pipeline.reports.lm_bias import report_markdown  # noqa: E402
from pipeline.settings import from_args, parser_for  # noqa: E402


def parser() -> argparse.ArgumentParser:
    """Every setting of a run (`BiasConfig`, declared once; the shared ones as `jobs/transcribe.py` has them)."""
    return parser_for(BiasConfig, __doc__)


def config_from_args(args: argparse.Namespace) -> BiasConfig:
    try:
        return from_args(BiasConfig, args)
    except ValueError as error:
        raise BiasError(str(error)) from None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    started = time.perf_counter()
    try:
        return run(config_from_args(args), started)
    except (BiasError, PreflightError) as error:
        raise SystemExit(f"lm_bias: {redact(str(error))}") from None


def run(config: BiasConfig, started: float) -> int:
    inputs = prepare_bias(config)  # before any cluster work
    print_line(inputs.describe())
    report = run_bias(config, inputs, started)
    print(report_markdown(report), flush=True)
    print_line(f"report -> {inputs.output.uri_of('report.md')}; decoding -> {inputs.output.uri_of('decoding.yaml')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
