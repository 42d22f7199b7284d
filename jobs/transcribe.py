"""Transcribe NeMo or Lhotse manifests into Parquet with word timestamps, on a Ray cluster or this machine.

    python jobs/transcribe.py                                  # the bundled samples, with the bundled model
    python jobs/transcribe.py --manifest s3://bucket/manifests/*.json --output s3://bucket/transcripts \\
        --model s3://bucket/models/asr.nemo --decoding alsd --beam-size 4 --lm s3://bucket/lm/domain.lm \\
        --lm-weight 0.3 --device cuda --gpu-actors 8
    ray job submit --address http://HEAD:8265 --working-dir . -- python jobs/transcribe.py ...

A YAML file (`--config job.yaml`) may hold any setting, in the sections of `pipeline/config.py` (top level:
manifests, output, ray_address; sections model, decoding, resources); flags given on the command line override
it. Running the same command again after a crash (same --output) transcribes only the rows not yet committed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.config import STRATEGIES, TranscribeJobConfig, config_from_dict, merge  # noqa: E402


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
    model = p.add_argument_group("model")
    model.add_argument("--model", dest="model_uri", metavar="URI",
                       help=f"NeMo RNN-T, TDT, CTC or hybrid .nemo, path or URI (default: the bundled model, "
                            f"{defaults.model.uri})")
    model.add_argument("--model-sha256", help="expected sha256 of the .nemo, checked before it is unpickled")
    model.add_argument("--cache-dir", help=f"node-local cache of remote models and LMs (default: "
                                           f"{defaults.model.cache_dir})")
    dec = p.add_argument_group("decoding")
    dec.add_argument("--decoding", "--strategy", dest="strategy", choices=STRATEGIES,
                     help="greedy: label-looping greedy (CTC greedy for CTC models); wind_greedy: greedy with "
                          "WIND's window; alsd / aes / wind_beam: ALSD++, AES++, WIND beam search (transducer); "
                          "ctc_greedy; ctc_beam: blank collapse + CTC prefix beam search on CPU actors "
                          f"(default: {decoding.strategy})")
    dec.add_argument("--beam-size", type=int, help=f"beam width (default: {decoding.beam_size})")
    dec.add_argument("--max-symbols", type=int,
                     help="labels per frame for transducers (default: the checkpoint's setting)")
    dec.add_argument("--window-size", type=int, help=f"WIND window in frames (default: {decoding.window_size})")
    dec.add_argument("--lm", dest="lm_uri", metavar="URI",
                     help="token-level n-gram LM: a binary from `python -m decoders.ngram.build`, or an ARPA file "
                          "(name containing .arpa)")
    dec.add_argument("--lm-sha256", help="expected sha256 of the LM file")
    dec.add_argument("--lm-weight", "--ngram-lm-alpha", type=float, dest="lm_weight",
                     help=f"shallow-fusion weight of the LM (default: {decoding.lm_weight})")
    dec.add_argument("--pruning", choices=("early", "late"),
                     help=f"transducer beam + LM: top-k before or after fusion (default: {decoding.pruning})")
    dec.add_argument("--blank-lm-scoring", choices=("none", "weighted"),
                     help=f"transducer beam + LM: blank scoring (default: {decoding.blank_lm_scoring})")
    dec.add_argument("--ctc-collapse-threshold", type=_collapse_threshold,
                     help="ctc_beam: blank collapse before the search of frames whose p(blank) exceeds this; 'weak': "
                          f"frames whose argmax is blank; 0: off (default: {decoding.ctc_collapse_threshold})")
    dec.add_argument("--no-cuda-graphs", dest="use_cuda_graphs", action="store_false", default=None,
                     help="run the transducer decoding loops eagerly on a GPU instead of replaying CUDA graphs")
    dec.add_argument("--ctc-insertion-bonus", type=float, help="ctc_beam: score added per label (default: 0)")
    res = p.add_argument_group("resources")
    res.add_argument("--device", choices=("auto", "cpu", "cuda"),
                     help=f"where the ASR actors run; auto: cuda when the cluster has GPUs (default: "
                          f"{resources.device})")
    res.add_argument("--gpu-actors", type=int,
                     help=f"ASR actors, one GPU each (on cpu: CPU actors) (default: {resources.gpu_actors})")
    res.add_argument("--cpu-actors", type=int,
                     help=f"audio fetch/decode actors (default: {resources.cpu_actors})")
    res.add_argument("--ctc-actors", type=int,
                     help=f"CPU actors for CTC beam search, detokenization and writing (default: "
                          f"{resources.ctc_actors})")
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
    ray_group = p.add_argument_group("ray")
    ray_group.add_argument("--ray-address",
                           help="cluster to join (default: RAY_ADDRESS, as `ray job submit` sets it, else a new "
                                "local Ray on 127.0.0.1)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    return p


def config_from_args(args: argparse.Namespace) -> TranscribeJobConfig:
    base: dict[str, Any] = {}
    if args.config:
        import yaml

        with open(args.config, encoding="utf-8") as handle:
            base = yaml.safe_load(handle) or {}
        if not isinstance(base, dict):
            raise SystemExit(f"{args.config}: expected a mapping of settings")
    collapse = args.ctc_collapse_threshold
    overrides = {
        "manifests": args.manifests,
        "output": args.output,
        "ray_address": args.ray_address,
        "model": {"uri": args.model_uri, "sha256": args.model_sha256, "cache_dir": args.cache_dir},
        "decoding": {
            "strategy": args.strategy, "beam_size": args.beam_size, "max_symbols": args.max_symbols,
            "window_size": args.window_size, "lm_uri": args.lm_uri, "lm_sha256": args.lm_sha256,
            "lm_weight": args.lm_weight, "pruning": args.pruning, "blank_lm_scoring": args.blank_lm_scoring,
            "ctc_insertion_bonus": args.ctc_insertion_bonus, "use_cuda_graphs": args.use_cuda_graphs,
        },
        "resources": {
            "device": args.device, "gpu_actors": args.gpu_actors, "cpu_actors": args.cpu_actors,
            "ctc_actors": args.ctc_actors, "batch_audio_s": args.batch_audio_s,
            "max_batch_size": args.max_batch_size, "window_rows": args.window_rows, "part_rows": args.part_rows,
            "asr_actor_cpus": args.asr_actor_cpus, "torch_threads": args.torch_threads,
        },
    }
    merged = merge(base, overrides)
    if collapse is not None:
        merged.setdefault("decoding", {})["ctc_collapse_threshold"] = collapse if collapse == "weak" or collapse > 0 \
            else None
    if args.lm_uri and args.lm_weight is None and not (base.get("decoding") or {}).get("lm_weight"):
        raise SystemExit("--lm needs --lm-weight (the LM's fusion weight, e.g. 0.3)")
    try:
        return config_from_dict(merged)
    except (TypeError, ValueError) as error:
        raise SystemExit(f"invalid configuration: {error}") from None


def advice(config: TranscribeJobConfig) -> list[str]:
    """Settings that are valid but likely to cost accuracy, each with what to do instead."""
    notes = []
    decoding = config.decoding
    if decoding.strategy == "ctc_beam" and decoding.lm_weight > 0 and decoding.ctc_insertion_bonus == 0:
        notes.append("ctc_beam with an LM and no --ctc-insertion-bonus: a token LM's cost per label makes the search "
                     "drop letters and short words; tune the bonus with the weight on a dev set "
                     "(benchmarks/accuracy.py does; docs/benchmarks.md shows the effect)")
    return notes


def connect(config: TranscribeJobConfig) -> None:
    import ray

    address = config.ray_address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address)
    else:  # a private local Ray for this job, on loopback only
        ray.init(include_dashboard=False, _node_ip_address="127.0.0.1")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    config = config_from_args(args)
    if args.print_config:
        print(json.dumps(config.to_dict(), indent=2, sort_keys=True))
        return 0
    if not Path(config.model.uri).exists() and "://" not in config.model.uri:
        raise SystemExit(f"no model at {config.model.uri}: pass --model PATH_OR_URI (a NeMo .nemo file)")
    lm_uri = config.decoding.lm_uri
    if lm_uri and not Path(lm_uri).exists() and "://" not in lm_uri:
        raise SystemExit(f"no LM at {lm_uri}: pass --lm PATH_OR_URI (a binary from `python -m decoders.ngram.build`, "
                         "or an ARPA file)")
    from pipeline.graph import JobError, run_transcription

    print(f"loopscribe: {', '.join(config.manifests)} -> {config.output} ({config.decoding.describe()})", flush=True)
    for note in advice(config):
        print(f"loopscribe: note: {note}", file=sys.stderr, flush=True)
    connect(config)
    try:
        summary = run_transcription(config)
    except (JobError, FileNotFoundError) as error:
        raise SystemExit(f"loopscribe: {error}") from None
    print(json.dumps(summary, indent=2, sort_keys=True))
    print(f"loopscribe: {summary['rows_ok']} transcripts ok, {summary['rows_error']} error rows -> "
          f"{config.output} (Parquet; read with pandas.read_parquet({config.output!r}))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
