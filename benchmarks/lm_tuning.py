"""Tuning an LM weight: encode the dev set once and decode it per setting, against a transcription per setting.

`jobs/lm_bias.py` tunes the LM weight (and CTC beam search's insertion bonus) the first way (`pipeline/lm/tuning.py`):
(a) load the model once, read and encode the dev set once (`encode_set`), then one `transcribe_set` and `score`
per setting. Without the job, a user runs (b): one full `pipeline.graph.run_transcription` per setting on the dev
manifest into a fresh output (the audio read, encoded, decoded and written to Parquet again each time, the model
loaded by each run's actors), then reads the output (`sink.read_output`) and scores it against the references.
Both try the same settings on the bundled model and `samples/domain/dev.json` (50 utterances), with a 6-gram
token LM built from `samples/domain/lm_text.txt`; each setting's WER must agree between the two. The per-setting
times are taken side by side: (a)'s decode, then (b)'s run, setting after setting. (a)'s total includes its model
load and encode; (b)'s totals leave out the one `ray.init` (in-process Ray, 2 CPUs), printed on its own.

    python benchmarks/lm_tuning.py            # alsd and ctc_beam (bonus 4), LM weights 0.5, 1, 2: 6 settings
    python benchmarks/lm_tuning.py --quick    # alsd at LM weight 1 only: under a minute on a 2-core CPU

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

import torch  # noqa: E402

from benchmarks._timing import machine  # noqa: E402
from pipeline import schema  # noqa: E402
from pipeline.config import BUNDLED_MODEL, ModelConfig, ResourcesConfig, TranscribeJobConfig  # noqa: E402
from pipeline.decoding import DecodingConfig  # noqa: E402
from pipeline.io import sink  # noqa: E402
from pipeline.lm import encode_set, score, takes_bonus, transcribe_set  # noqa: E402

FULL_STRATEGIES, FULL_WEIGHTS = ("alsd", "ctc_beam"), (0.5, 1.0, 2.0)
QUICK_STRATEGIES, QUICK_WEIGHTS = ("alsd",), (1.0,)  # one transcription run: (a)'s fixed cost weighs most here
BONUS = 4.0  # ctc_beam's insertion bonus in every setting (token LMs favour short outputs without one)


def settings(strategies: tuple[str, ...], weights: tuple[float, ...], beam_size: int,
             lm_path: str) -> list[DecodingConfig]:
    return [DecodingConfig(strategy=strategy, beam_size=beam_size, lm_uri=lm_path, lm_weight=weight,
                           ctc_insertion_bonus=BONUS if strategy == "ctc_beam" else 0.0)
            for strategy in strategies for weight in weights]


def name(decoding: DecodingConfig) -> str:
    bonus = f", bonus {decoding.ctc_insertion_bonus:g}" if takes_bonus(decoding) else ""
    return f"{decoding.strategy} weight {decoding.lm_weight:g}{bonus}"


def transcription_run(decoding: DecodingConfig, manifest: Path, output: Path, cache_dir: Path,
                      threads: int) -> tuple[float, float]:
    """(b): one job into a fresh output, read back and scored; -> (WER, CER)."""
    from pipeline.graph import run_transcription

    config = TranscribeJobConfig(manifests=(str(manifest),), output=str(output),
                                 model=ModelConfig(uri=str(BUNDLED_MODEL), cache_dir=str(cache_dir)),
                                 decoding=decoding, resources=ResourcesConfig(device="cpu", torch_threads=threads))
    run_transcription(config, progress=lambda _: None)
    table = sink.read_output(str(output), columns=[schema.STATUS, schema.REFERENCE_TEXT, schema.TEXT])
    if set(table.column(schema.STATUS).to_pylist()) != {schema.STATUS_OK}:
        raise RuntimeError(f"{name(decoding)}: the job wrote error rows")
    measured = score(table.column(schema.REFERENCE_TEXT).to_pylist(), table.column(schema.TEXT).to_pylist())
    return measured.wer, measured.cer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one setting: alsd, LM weight 1")
    parser.add_argument("--weights", type=float, nargs="+", help="LM weights per strategy (default: 0.5 1 2)")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2, help="torch threads, in (a) and in (b)'s ASR actor")
    parser.add_argument("--cpus", type=int, default=2, help="logical CPUs of the in-process Ray")
    args = parser.parse_args()
    weights = tuple(args.weights or (QUICK_WEIGHTS if args.quick else FULL_WEIGHTS))
    torch.set_num_threads(args.threads)
    domain = REPOSITORY / "samples" / "domain"
    manifest = domain / "dev.json"

    import ray

    from decoders.ngram import NgramLm
    from pipeline.io import load_audio, read_manifest
    from pipeline.lm import build_lm
    from pipeline.model import load_asr_model

    work = Path(tempfile.mkdtemp(prefix="lslmt", dir="/tmp"))  # short: Ray's socket paths live under it
    rows: list[dict] = []
    try:
        lm_path = str(work / "domain.lm")
        lm_report = build_lm([domain / "lm_text.txt"], str(BUNDLED_MODEL), lm_path, order=6)
        tried = settings(QUICK_STRATEGIES if args.quick else FULL_STRATEGIES, weights, args.beam_size, lm_path)

        clock = time.perf_counter()
        ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                 _temp_dir=str(work / "ray"), logging_level="WARNING", log_to_driver=False)
        ray_init_s = time.perf_counter() - clock
        from ray.data import DataContext

        DataContext.get_current().enable_progress_bars = False
        for logger in ("ray", "ray.data"):
            logging.getLogger(logger).setLevel(logging.ERROR)

        clock = time.perf_counter()  # (a): model, audio and encoder once
        model = load_asr_model(str(BUNDLED_MODEL))
        lm = NgramLm.load(lm_path)
        load_s = time.perf_counter() - clock
        clock = time.perf_counter()
        rate = model.facts.sample_rate
        dev_rows = list(read_manifest(str(manifest)))
        waveforms = [load_audio(r[schema.AUDIO_FILEPATH], rate, r[schema.OFFSET], r[schema.DURATION] or None,
                                channel=r[schema.CHANNEL]).samples for r in dev_rows]
        dev = encode_set(model, waveforms, [r[schema.REFERENCE_TEXT] for r in dev_rows], sample_rate=rate)
        encode_s = time.perf_counter() - clock

        for index, decoding in enumerate(tried):
            clock = time.perf_counter()
            measured = score(dev.references, transcribe_set(model, decoding, lm, dev))
            wer_a, cer_a = measured.wer, measured.cer
            seconds_a = time.perf_counter() - clock
            clock = time.perf_counter()
            wer_b, cer_b = transcription_run(decoding, manifest, work / f"out{index}", work / "cache", args.threads)
            seconds_b = time.perf_counter() - clock
            rows.append({"setting": name(decoding), "strategy": decoding.strategy, "lm_weight": decoding.lm_weight,
                         "insertion_bonus": decoding.ctc_insertion_bonus if takes_bonus(decoding) else None,
                         "wer_a": wer_a, "wer_b": wer_b, "cer_a": cer_a, "cer_b": cer_b,
                         "seconds_a": round(seconds_a, 3), "seconds_b": round(seconds_b, 3)})
            print(f"  {rows[-1]['setting']}: (a) WER {wer_a:.2%} in {seconds_a:.2f} s, (b) WER {wer_b:.2%} in "
                  f"{seconds_b:.1f} s", flush=True)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)

    total_a = load_s + encode_s + sum(r["seconds_a"] for r in rows)
    total_b = sum(r["seconds_b"] for r in rows)
    equal = sum(r["wer_a"] == r["wer_b"] for r in rows)
    command = " ".join(["python benchmarks/lm_tuning.py", *sys.argv[1:]])
    print(f"\n# {command}: the bundled model, {len(dev.references)} dev utterances ({dev.audio_s:.0f} s of audio), "
          f"LM order {lm_report.order} ({sum(lm_report.ngram_counts)} n-grams), beam size {args.beam_size}, "
          f"{args.threads} torch threads; in-process Ray with {args.cpus} CPUs (ray.init {ray_init_s:.1f} s, "
          "not counted)")
    print("| setting | WER (a) | WER (b) | s (a) | s (b) |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| (a) once: model and LM load, audio read, encode | | | {load_s + encode_s:.2f} | |")
    for r in rows:
        print(f"| {r['setting']} | {r['wer_a']:.2%} | {r['wer_b']:.2%} | {r['seconds_a']:.2f} | "
              f"{r['seconds_b']:.1f} |")
    print(f"| total, {len(rows)} setting{'s' if len(rows) != 1 else ''} | | | {total_a:.1f} | {total_b:.1f} |")
    print(f"(b) / (a): {total_b / total_a:.1f}x in total; a setting alone, (b)'s run over (a)'s decode: "
          f"{total_b / max(total_a - load_s - encode_s, 1e-9):.0f}x; "
          f"WER equal in {equal} of {len(rows)} settings")
    print(json.dumps({"benchmark": "lm_tuning", "command": command, "quick": args.quick,
                      "dev_utterances": len(dev.references), "dev_audio_s": round(dev.audio_s, 2),
                      "lm": {"order": lm_report.order, "ngrams": sum(lm_report.ngram_counts)},
                      "beam_size": args.beam_size, "ray_init_s": round(ray_init_s, 2), "load_s": round(load_s, 2),
                      "encode_s": round(encode_s, 2), "settings": rows, "total_a_s": round(total_a, 2),
                      "total_b_s": round(total_b, 2), "ratio_b_over_a": round(total_b / total_a, 2),
                      "wer_equal": equal, **machine("cpu")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
