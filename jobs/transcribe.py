"""Transcribe NeMo or Lhotse manifests into Parquet with word timestamps, on a Ray cluster or this machine.

    python jobs/transcribe.py                                  # the bundled samples, with the bundled model
    python jobs/transcribe.py --manifest s3://bucket/manifests/*.json --output s3://bucket/transcripts \\
        --model s3://bucket/models/asr.nemo --decoding alsd --beam-size 4 --lm s3://bucket/lm/domain.lm \\
        --lm-weight 0.3 --device cuda --asr-actors 8
    ray job submit --address http://HEAD:8265 --working-dir . -- python jobs/transcribe.py ...

A YAML file (`--config job.yaml`) may hold any setting, in the sections of `pipeline/config.py` (top level:
manifests, output, ray_address; sections model, decoding, resources); flags given on the command line override
it. Running the same command again after a crash (same --output) transcribes only the rows not yet committed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import traceback
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.config import TranscribeJobConfig, config_from_flags  # noqa: E402
from pipeline.decoding.plan import DecodingError, DecodingPlan, advice, describe, plan_decoding  # noqa: E402
from pipeline.decoding.fusion import lm_problem  # noqa: E402
from pipeline.io.redact import redact, secrets_in  # noqa: E402
from pipeline.settings import add_flags, overrides_from_args  # noqa: E402


def parser() -> argparse.ArgumentParser:
    """Every setting of `TranscribeJobConfig` as a flag (declared once, in `pipeline/config.py`)."""
    p = argparse.ArgumentParser(
        prog="jobs/transcribe.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file with any of the settings below; flags override it")
    add_flags(p, TranscribeJobConfig)
    p.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    return p


def config_from_args(args: argparse.Namespace) -> TranscribeJobConfig:
    try:
        return config_from_flags(args.config, overrides_from_args(args, TranscribeJobConfig))
    except (TypeError, ValueError) as error:
        raise SystemExit(f"invalid configuration: {error}") from None


def check_before_starting(config: TranscribeJobConfig) -> None:
    """What can be refused before Ray starts: a missing local model or LM, and a strategy the (local) model
    cannot run (a remote model is checked by the driver once it is fetched)."""
    model_uri = config.model.uri
    if "://" not in model_uri and not Path(model_uri).is_file():
        raise SystemExit(f"loopscribe: no model at {model_uri}: pass --model PATH_OR_URI (a NeMo .nemo file)")
    lm_uri = config.decoding.lm_uri
    if lm_uri and not Path(lm_uri).is_file() and "://" not in lm_uri:
        raise SystemExit(f"loopscribe: no LM at {lm_uri}: pass --lm PATH_OR_URI (a binary from "
                         "`python jobs/build_lm.py`, or an ARPA file)")
    phrases_uri = config.decoding.phrases_uri
    if phrases_uri and "://" not in phrases_uri:  # its lines are checked here; its tokens below, with a local model
        if not Path(phrases_uri).is_file():
            raise SystemExit(f"loopscribe: no phrase list at {phrases_uri}: pass --phrases PATH_OR_URI (one phrase a "
                             "line)")
        problem = phrase_list_problem(phrases_uri)
        if problem:
            raise SystemExit(f"loopscribe: --phrases {problem}")
    if "://" in model_uri:
        return
    from pipeline.stages.chunks import check_attention
    from pipeline.model.nemo_file import LayoutUnavailable, read_model_facts, read_model_layout

    try:
        facts = read_model_facts(model_uri)
        plan = plan_decoding(facts, config.decoding, model_name=model_uri)
        check_attention(config.long_audio.attention, facts.encoder_attention, model_uri)
    except (DecodingError, ValueError) as error:
        raise SystemExit(f"loopscribe: {error}") from None
    if config.decoding.confidence_calibration:  # the writer checks it too; here it fails before Ray starts
        from pipeline.model.actor import load_checked_calibration

        try:
            load_checked_calibration(config.model, plan)
        except (OSError, ValueError) as error:
            raise SystemExit(f"loopscribe: --confidence-calibration: {error}") from None
    if plan.fuses_lm and "://" not in lm_uri:
        try:
            vocab_size = plan.lm_vocab_size(read_model_layout(model_uri))
        except LayoutUnavailable:
            vocab_size = None  # checked once the model is loaded
        problem = lm_problem(lm_uri, vocab_size, config.decoding.lm_level)
        if problem:
            raise SystemExit(f"loopscribe: --lm {problem}")
    if plan.boosts and "://" not in phrases_uri:
        problem = phrase_list_problem(phrases_uri, model_uri, plan)
        if problem:
            raise SystemExit(f"loopscribe: --phrases {problem}")


def phrase_list_problem(path: str, model_path: str | None = None, plan: DecodingPlan | None = None,
                        name: str | None = None) -> str | None:
    """Why the phrase list at a local `path` cannot be boosted (None: it can), read before any actor starts: its
    lines (an empty phrase, a malformed weight, not UTF-8), and, given a local model and its plan, each phrase's
    tokens (characters the tokenizer cannot write). Each message names the file (`name`, else `path`) and line.
    Used by this job and `jobs/lm_bias.py`."""
    from decoders.boosting.tree import PhraseListError, read_phrase_list
    from pipeline.decoding.fusion import boosting_from_phrase_file
    from pipeline.model.nemo_file import LayoutUnavailable, read_model_layout

    try:
        if model_path is not None and plan is not None:
            try:
                layout = read_model_layout(model_path)
            except LayoutUnavailable:
                layout = None  # tokenized once the model is loaded
            if layout is not None:
                boosting_from_phrase_file(path, layout.tokenizer.processor, plan.lm_vocab_size(layout), name=name)
                return None
        read_phrase_list(path, name)
    except (PhraseListError, ValueError) as error:
        return str(error)
    return None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    config = config_from_args(args)
    if args.print_config:
        print(json.dumps(config.to_dict(), indent=2, sort_keys=True))
        return 0
    secrets = secrets_in(dataclasses.asdict(config))

    def hide(text: str) -> str:  # what a storage library quotes of a URI's credentials, too
        return redact(text, secrets)

    check_before_starting(config)
    from pipeline.graph import JobError, connect_ray, expand_manifests, run_transcription

    try:
        manifest_uris = expand_manifests(config, warn=lambda line: print(f"loopscribe: warning: {hide(line)}",
                                                                         file=sys.stderr, flush=True))
    except (JobError, FileNotFoundError) as error:
        raise SystemExit(f"loopscribe: {hide(str(error))}") from None
    print(hide(f"loopscribe: {len(manifest_uris)} manifest(s) ({', '.join(config.manifests)}) -> {config.output} "
                 f"({describe(config.decoding)})"), flush=True)
    for note in advice(config.decoding):
        print(f"loopscribe: note: {note}", file=sys.stderr, flush=True)
    connect_ray(config.ray_address)
    try:
        summary = run_transcription(config, manifest_uris=manifest_uris)
    except (JobError, FileNotFoundError) as error:
        raise SystemExit(f"loopscribe: {hide(str(error))}") from None
    except Exception as error:  # a bug or an outage: the whole traceback, with no credential in it
        print(hide("".join(traceback.format_exception(error))), file=sys.stderr, flush=True)
        raise SystemExit(f"loopscribe: the job failed: {hide(f'{type(error).__name__}: {error}')}") from None
    print(json.dumps(summary, indent=2, sort_keys=True))
    for finding in findings(summary):
        print(f"loopscribe: warning: {finding}", file=sys.stderr, flush=True)
    print(hide(f"loopscribe: {summary['rows_ok']} transcripts ok, {summary['rows_error']} error rows -> "
                 f"{config.output} (Parquet; read with pandas.read_parquet({config.output!r}))"))
    if summary["rows_error"]:
        print("loopscribe: error rows stay as they are on a rerun; once their cause is fixed, the same command with "
              "--retry-errors transcribes them again", flush=True)
    return 0


def findings(summary: dict[str, Any]) -> list[str]:
    """What in a finished job's summary a user should look at, one line each."""
    lines = []
    if summary.get("error_rows_replaced"):
        lines.append(f"{summary['error_rows_replaced']} error row(s) of earlier runs transcribed again "
                     "(--retry-errors) and replaced by their new rows")
    if summary["duplicates_removed"]:
        lines.append(f"{summary['duplicates_removed']} row(s) named an utterance (same audio, offset, duration, "
                     "channel and id) that another row already had: each utterance is written once")
    if summary["ids_given_to_several_utterances"]:
        lines.append(f"{summary['ids_given_to_several_utterances']} manifest id(s) name more than one utterance "
                     f"(all kept), e.g. {', '.join(summary['ids_given_to_several_examples'])}")
    if summary["duration_mismatches"]:
        lines.append(f"{summary['duration_mismatches']} row(s) whose manifest duration differs from the audio's, "
                     f"e.g. {summary['duration_mismatch_examples'][0]} (column audio_duration has the measured one)")
    return lines


if __name__ == "__main__":
    sys.exit(main())
