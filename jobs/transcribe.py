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

from pipeline.config import (  # noqa: E402
    RESOURCE_ALIASES,
    TranscribeJobConfig,
    config_from_dict,
    merge,
    with_current_names,
)
from pipeline.decoding.plan import STRATEGIES, DecodingError, DecodingPlan, advice, describe, plan_decoding  # noqa: E402
from pipeline.decoding.fusion import lm_problem  # noqa: E402
from pipeline.io.redact import redact, secrets_in  # noqa: E402


def _collapse_threshold(value: str) -> float | str:
    if value == "weak":
        return value
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'weak', got {value!r}") from None


def parser() -> argparse.ArgumentParser:
    defaults = TranscribeJobConfig()
    decoding, resources = defaults.decoding, defaults.resources
    p = argparse.ArgumentParser(
        prog="jobs/transcribe.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file with any of the settings below; flags override it")
    io = p.add_argument_group("input and output")
    io.add_argument("--manifest", nargs="+", dest="manifests", metavar="URI",
                    help="NeMo JSON-lines or Lhotse cut manifests (.jsonl[.gz]): paths, fsspec URIs or globs "
                         f"(default: the bundled samples, {defaults.manifests[0]})")
    io.add_argument("--output", help=f"folder or URI for the Parquet parts, _config.json, _summary.json and "
                                     f"_SUCCESS (default: {defaults.output})")
    io.add_argument("--retry-errors", action="store_true", default=None,
                    help="transcribe again the rows an earlier run into the same --output committed as error rows "
                         "(audio that could not be read then, say); the new row replaces the error row")
    inputs = p.add_argument_group("input bounds (a row past one is an error row)")
    inputs.add_argument("--glob", choices=("auto", "always", "never"),
                        help="read --manifest names as globs: auto: only where no file has that very name "
                             f"(default: {defaults.input.glob})")
    inputs.add_argument("--read-timeout-s", type=float,
                        help=f"seconds one audio file's read may take (default: {defaults.input.read_timeout_s:g})")
    inputs.add_argument("--max-file-bytes", type=int,
                        help=f"largest audio file read (default: {defaults.input.max_file_bytes})")
    inputs.add_argument("--max-row-duration-s", type=float,
                        help=f"most seconds of audio one row may decode to (default: "
                             f"{defaults.input.max_row_duration_s:g})")
    inputs.add_argument("--min-sample-rate", type=int,
                        help=f"lowest audio sample rate accepted (default: {defaults.input.min_sample_rate})")
    inputs.add_argument("--duration-tolerance-s", type=float,
                        help="a manifest duration further than this from the measured one is counted in the "
                             f"summary (default: {defaults.input.duration_tolerance_s:g})")
    long = p.add_argument_group("long recordings (cut into overlapping chunks, merged back into one row)")
    long.add_argument("--chunk-s", type=float,
                      help="rows longer than this are decoded in chunks of this many seconds; 0: never (the "
                           f"encoder's memory then grows with the row) (default: {defaults.long_audio.chunk_s:g})")
    long.add_argument("--chunk-overlap-s", type=float, dest="overlap_s",
                      help=f"seconds each chunk overlaps the next (default: {defaults.long_audio.overlap_s:g})")
    long.add_argument("--attention", choices=("full", "local"),
                      help="encoder self-attention: full, or local (NeMo's rel_pos_local_attn; Conformer models) "
                           f"(default: {defaults.long_audio.attention})")
    long.add_argument("--local-context", type=int,
                      help="encoder frames each side that local attention sees (default: "
                           f"{defaults.long_audio.local_context})")
    model = p.add_argument_group("model")
    model.add_argument("--model", dest="model_uri", metavar="URI",
                       help=f"NeMo RNN-T, TDT, CTC or hybrid .nemo, path or URI (default: the bundled model, "
                            f"{defaults.model.uri})")
    model.add_argument("--model-sha256", help="expected sha256 of the .nemo, checked before it is unpickled")
    model.add_argument("--cache-dir", help=f"node-local cache of remote models and LMs (default: "
                                           f"{defaults.model.cache_dir})")
    dec = p.add_argument_group("decoding")
    dec.add_argument("--decoding", "--strategy", dest="strategy", choices=tuple(STRATEGIES),
                     help="; ".join(f"{s.name}: {s.help}" for s in STRATEGIES.values())
                          + f" (default: {decoding.strategy})")
    dec.add_argument("--beam-size", type=int, help=f"beam width (default: {decoding.beam_size})")
    dec.add_argument("--max-symbols", type=int,
                     help="labels per frame for transducers (default: the checkpoint's setting)")
    dec.add_argument("--window-size", type=int, help=f"WIND window in frames (default: {decoding.window_size})")
    dec.add_argument("--lm", dest="lm_uri", metavar="URI",
                     help="n-gram LM: a binary from `python jobs/build_lm.py`, or an ARPA file (name containing "
                          ".arpa), token-level or word-level (KenLM, SRILM, varikn: converted with the model's "
                          "tokenizer and cached)")
    dec.add_argument("--lm-level", choices=("auto", "token", "word"),
                     help=f"an ARPA --lm's units; auto tells them by its unigrams (default: {decoding.lm_level})")
    dec.add_argument("--lm-sha256", help="expected sha256 of the LM file")
    dec.add_argument("--lm-weight", "--ngram-lm-alpha", type=float, dest="lm_weight",
                     help=f"shallow-fusion weight of the LM (default: {decoding.lm_weight})")
    dec.add_argument("--phrases", dest="phrases_uri", metavar="FILE_OR_URI",
                     help="boost these phrases (names, products) with any strategy, alone or with --lm: one a line, "
                          "`phrase<TAB>weight` to give a phrase its own score (default weight 1)")
    dec.add_argument("--boost-weight", type=float,
                     help=f"fusion weight of the phrase boosting, of --phrases and of the rows' own `phrases` lists "
                          f"(a manifest key; 0 turns those off) (default: {decoding.boost_weight:g})")
    dec.add_argument("--pruning", choices=("early", "late"),
                     help=f"transducer beam + LM: top-k before or after fusion (default: {decoding.pruning})")
    dec.add_argument("--blank-lm-scoring", choices=("none", "weighted"),
                     help=f"transducer beam + LM: blank scoring (default: {decoding.blank_lm_scoring})")
    dec.add_argument("--ctc-collapse-threshold", type=_collapse_threshold,
                     help="ctc_beam: blank collapse before the search of frames whose p(blank) exceeds this; 'weak': "
                          f"frames whose argmax is blank; 0: off (default: {decoding.ctc_collapse_threshold})")
    dec.add_argument("--no-cuda-graphs", dest="use_cuda_graphs", action="store_false", default=None,
                     help="run the transducer decoding loops eagerly on a GPU instead of replaying CUDA graphs")
    dec.add_argument("--ctc-insertion-bonus", type=float,
                     help=f"ctc_beam: score added per label (default: {decoding.ctc_insertion_bonus:g})")
    dec.add_argument("--ctc-beam-threshold", type=float,
                     help=f"ctc_beam: drop candidates this far (log-prob) below the best (default: "
                          f"{decoding.ctc_beam_threshold:g})")
    conf = p.add_argument_group("confidence (greedy strategies; NeMo's ConfidenceConfig names and defaults)")
    conf.add_argument("--confidence", action="store_true", default=None,
                      help="fill words[].confidence and the utterance's `confidence` column")
    conf.add_argument("--head-agreement", action="store_true", default=None,
                      help="a hybrid model: also decode the other head greedily; its text in `second_head_text` and "
                           "the heads' word agreement (1 - WER between them) in `head_agreement`")
    conf.add_argument("--confidence-method", choices=("max_prob", "entropy"),
                      help=f"the measure (default: {decoding.confidence_method})")
    conf.add_argument("--entropy-type", choices=("gibbs", "tsallis", "renyi"),
                      help=f"entropy measure (default: {decoding.entropy_type})")
    conf.add_argument("--confidence-alpha", type=float, help=f"alpha (default: {decoding.confidence_alpha:g})")
    conf.add_argument("--entropy-norm", choices=("exp", "lin"),
                      help=f"entropy normalisation (default: {decoding.entropy_norm})")
    conf.add_argument("--confidence-aggregation", choices=("min", "max", "mean", "prod"),
                      help=f"tokens -> words -> utterance (default: {decoding.confidence_aggregation})")
    conf.add_argument("--confidence-include-blank", dest="confidence_exclude_blank", action="store_false",
                      default=None, help="count the blank steps beside each token (default: excluded)")
    conf.add_argument("--confidence-calibration", metavar="FILE",
                      help="map word confidence to P(word right) with this calibration (a path or URI, fitted for "
                           "this model and measure by `python benchmarks/confidence.py --write-calibration`)")
    res = p.add_argument_group("resources")
    res.add_argument("--device", choices=("auto", "cpu", "cuda"),
                     help=f"where the ASR actors run; auto: cuda when the cluster has GPUs (default: "
                          f"{resources.device})")
    res.add_argument("--asr-actors", type=int,
                     help=f"encoder + decoding actors, one GPU each (on the CPU: fractional CPUs) (default: "
                          f"{resources.asr_actors})")
    res.add_argument("--audio-actors", type=int,
                     help=f"audio fetch/decode actors (default: {resources.audio_actors})")
    res.add_argument("--writer-actors", type=int,
                     help=f"CPU actors for CTC beam search, detokenization and writing (default: "
                          f"{resources.writer_actors})")
    for old, new in RESOURCE_ALIASES.items():  # the old names still work, unlisted
        res.add_argument(f"--{old.replace('_', '-')}", type=int, dest=new, help=argparse.SUPPRESS)
    res.add_argument("--batch-audio-s", type=float,
                     help=f"padded audio seconds per encoder batch (default: {resources.batch_audio_s})")
    res.add_argument("--max-batch-size", type=int,
                     help=f"utterances per encoder batch (default: {resources.max_batch_size})")
    res.add_argument("--window-rows", type=int,
                     help=f"rows each ASR call buckets by length (default: {resources.window_rows})")
    res.add_argument("--part-rows", type=int, help=f"rows per Parquet part (default: {resources.part_rows})")
    res.add_argument("--asr-actor-cpus", type=float,
                     help="CPUs reserved per ASR actor (default: 1 with a GPU, 0.5 without)")
    res.add_argument("--torch-threads", type=int, help="torch threads per ASR actor on the CPU")
    res.add_argument("--side-stage-nice", type=int,
                     help=f"steps of niceness the audio and writer actors run below the ASR actor, so that it runs "
                          f"first on busy cores; 0: all alike (default: {resources.side_stage_nice})")
    ray_group = p.add_argument_group("ray")
    ray_group.add_argument("--ray-address",
                           help="cluster to join (default: RAY_ADDRESS, as `ray job submit` sets it, else a new "
                                "local Ray on 127.0.0.1)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    return p


def config_from_args(args: argparse.Namespace) -> TranscribeJobConfig:
    base: dict[str, Any] = {}
    try:
        if args.config:
            import yaml

            with open(args.config, encoding="utf-8") as handle:
                base = yaml.safe_load(handle) or {}
            if not isinstance(base, dict):
                raise SystemExit(f"{args.config}: expected a mapping of settings")
        overrides = {
            "manifests": args.manifests,
            "output": args.output,
            "ray_address": args.ray_address,
            "retry_errors": args.retry_errors,
            "model": {"uri": args.model_uri, "sha256": args.model_sha256, "cache_dir": args.cache_dir},
            "input": {
                "glob": args.glob, "read_timeout_s": args.read_timeout_s, "max_file_bytes": args.max_file_bytes,
                "max_row_duration_s": args.max_row_duration_s, "min_sample_rate": args.min_sample_rate,
                "duration_tolerance_s": args.duration_tolerance_s,
            },
            "decoding": {
                "strategy": args.strategy, "beam_size": args.beam_size, "max_symbols": args.max_symbols,
                "window_size": args.window_size, "lm_uri": args.lm_uri, "lm_sha256": args.lm_sha256,
                "lm_weight": args.lm_weight, "lm_level": args.lm_level, "pruning": args.pruning,
                "blank_lm_scoring": args.blank_lm_scoring,
                "phrases_uri": args.phrases_uri, "boost_weight": args.boost_weight,
                "ctc_collapse_threshold": args.ctc_collapse_threshold,
                "ctc_insertion_bonus": args.ctc_insertion_bonus, "ctc_beam_threshold": args.ctc_beam_threshold,
                "use_cuda_graphs": args.use_cuda_graphs, "confidence": args.confidence,
                "confidence_method": args.confidence_method, "entropy_type": args.entropy_type,
                "confidence_alpha": args.confidence_alpha, "entropy_norm": args.entropy_norm,
                "confidence_aggregation": args.confidence_aggregation,
                "confidence_exclude_blank": args.confidence_exclude_blank,
                "confidence_calibration": args.confidence_calibration, "head_agreement": args.head_agreement,
            },
            "long_audio": {"chunk_s": args.chunk_s, "overlap_s": args.overlap_s, "attention": args.attention,
                           "local_context": args.local_context},
            "resources": {
                "device": args.device, "asr_actors": args.asr_actors, "audio_actors": args.audio_actors,
                "writer_actors": args.writer_actors, "batch_audio_s": args.batch_audio_s,
                "max_batch_size": args.max_batch_size, "window_rows": args.window_rows, "part_rows": args.part_rows,
                "asr_actor_cpus": args.asr_actor_cpus, "torch_threads": args.torch_threads,
                "side_stage_nice": args.side_stage_nice,
            },
        }
        return config_from_dict(merge(with_current_names(base), overrides))
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
