"""Pseudo-labelling a long recording: segments of at most --max-segment-s against the same utterances one by one.

The recording is `benchmarks/long_audio.py`'s: the bundled test utterances (samples/ and samples/domain/) joined in a
seeded random order, repeated as needed, with pauses of 0.3-1.5 s, each utterance's start known. Two runs of
the job's library (`pipeline/labels/runs.py`, as `jobs/pseudo_label.py` runs it: Ray on this machine, the
bundled model, default filters):

- **one by one**: a manifest of the distinct utterances, each its own row (with its reference text);
- **the recording**: one row of the whole recording, no reference text, `--output-format nemo nemo_tarred shar`:
  the row is cut between words into phrases, each judged on its own, and the kept ones packed into segments of at
  most --max-segment-s.

Each written segment and each rejected phrase is given as reference the utterances whose middle falls inside it
(an utterance in none counts as deleted in the "all" figure). Figures: the WER of all of them and of the kept
segments, next to the WER of the same placed utterances decoded one by one (all, and those the one-by-one run
kept); the longest and median segment; the phrases kept and the share of the recording in kept segments; and the
outputs read back (the tarred set by NeMo's `TarredAudioToCharDataset` counted, the Shar by `CutSet.from_shar`,
`train.json` lines). Figures: docs/benchmarks.md.

    python benchmarks/pseudo_label_segments.py --quick        # a 4-minute recording
    python benchmarks/pseudo_label_segments.py                # 20 minutes (issue 35's figure)

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._timing import machine  # noqa: E402
from benchmarks.long_audio import SAMPLE_RATE, build_recording, normalise, utterances  # noqa: E402
from pipeline.config import BUNDLED_MODEL  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 4-minute recording")
    parser.add_argument("--minutes", type=float, default=20.0, help="length of the recording")
    parser.add_argument("--max-segment-s", type=float, default=20.0)
    parser.add_argument("--model", default=str(BUNDLED_MODEL))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="folder of the labels (default: a new temporary folder)")
    args = parser.parse_args()
    if args.quick:
        args.minutes = 4.0
    return args


def run_folder(output: Path) -> Path:
    (identity,) = output.glob("labels-*")
    return sorted(p for p in (identity / "runs").iterdir() if (p / "labelled.txt").exists())[-1]


def lines_of(path: Path) -> list[dict]:
    if not path.exists():
        return []
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def wer(references: list[str], hypotheses: list[str]) -> float:
    import jiwer

    pairs = [(r, h) for r, h in zip(references, hypotheses) if r]
    return 100 * jiwer.wer([r for r, _ in pairs], [h for _, h in pairs]) if pairs else float("nan")


def main() -> None:
    args = parse_args()
    import soundfile

    from pipeline.labels import LabelConfig, label_run, prepare_label_run

    def pseudo_label(manifest: Path, output: Path, formats: tuple[str, ...]) -> None:
        """One run of the job's library (`jobs/pseudo_label.py` is these calls and prints)."""
        config = LabelConfig(output=str(output), manifest=(str(manifest),), model=args.model, device="cpu",
                             max_segment_s=args.max_segment_s, output_format=formats)
        label_run(config, prepare_label_run(config), time.time())

    pool = utterances()
    samples, placed = build_recording(pool, args.minutes, args.seed)
    audio_s = len(samples) / SAMPLE_RATE
    folder = Path(args.output or tempfile.mkdtemp(prefix="pl-segments-"))
    folder.mkdir(parents=True, exist_ok=True)
    flac = folder / "recording.flac"
    soundfile.write(flac, samples, SAMPLE_RATE)
    (folder / "long.json").write_text(json.dumps({"audio_filepath": str(flac), "duration": audio_s}) + "\n")
    distinct = {u["path"]: u for u in pool}
    (folder / "short.json").write_text("".join(
        json.dumps({"audio_filepath": u["path"], "duration": len(u["samples"]) / SAMPLE_RATE, "text": u["text"]})
        + "\n" for u in distinct.values()))
    print(f"recording: {audio_s / 60:.1f} min, {len(placed)} utterances ({folder})", flush=True)

    started = time.perf_counter()
    pseudo_label(folder / "short.json", folder / "one_by_one", ("nemo",))
    short_s = time.perf_counter() - started
    started = time.perf_counter()
    pseudo_label(folder / "long.json", folder / "recording", ("nemo", "nemo_tarred", "shar"))
    long_s = time.perf_counter() - started

    short_run = run_folder(folder / "one_by_one")
    alone, kept_alone = {}, set()
    for line in lines_of(short_run / "train.json"):
        alone[line["audio_filepath"]] = normalise(line["text"])
        kept_alone.add(line["audio_filepath"])
    for line in lines_of(short_run / "rejected.json"):
        alone[line["audio_filepath"]] = normalise(line.get("text") or "")
    references = [u["text"] for u in placed]
    one_by_one_wer = wer(references, [alone[u["path"]] for u in placed])
    one_by_one_kept_wer = wer([u["text"] for u in placed if u["path"] in kept_alone],
                              [alone[u["path"]] for u in placed if u["path"] in kept_alone])

    long_run = run_folder(folder / "recording")
    kept = lines_of(long_run / "train.json")
    rejected = [line for line in lines_of(long_run / "rejected.json") if not line["reason"].startswith("error")]
    segments = sorted([(line, True) for line in kept] + [(line, False) for line in rejected],
                      key=lambda item: item[0].get("offset", 0.0))
    spans = [(line.get("offset", 0.0), line.get("offset", 0.0) + line["duration"]) for line, _ in segments]
    refs: list[list[str]] = [[] for _ in segments]
    unplaced = []
    for utterance in placed:
        middle = utterance["start_s"] + len(utterance["samples"]) / SAMPLE_RATE / 2
        inside = [k for k, (start, end) in enumerate(spans) if start <= middle < end]
        (refs[inside[0]].append(utterance["text"]) if inside else unplaced.append(utterance["text"]))
    hyps = [normalise(line.get("text") or "") for line, _ in segments]
    all_wer = wer([" ".join(r) for r in refs] + unplaced, hyps + [""] * len(unplaced))
    kept_wer = wer([" ".join(r) for r, (_, keep) in zip(refs, segments) if keep],
                   [h for h, (_, keep) in zip(hyps, segments) if keep])
    longest = max((line["duration"] for line, _ in segments), default=0.0)

    from lhotse import CutSet

    shar = list(CutSet.from_shar(in_dir=long_run / "shar"))
    tarred_lines = lines_of(long_run / "nemo_tarred" / "tarred_audio_manifest.json")
    shards = len(list((long_run / "nemo_tarred").glob("audio_*.tar")))
    from nemo.collections.asr.data.audio_to_text import TarredAudioToCharDataset

    dataset = TarredAudioToCharDataset(
        audio_tar_filepaths=[str(p) for p in sorted((long_run / "nemo_tarred").glob("audio_*.tar"))],
        manifest_filepath=str(long_run / "nemo_tarred" / "tarred_audio_manifest.json"),
        labels=list(" abcdefghijklmnopqrstuvwxyz'"), sample_rate=SAMPLE_RATE, shuffle_n=0, min_duration=None)
    nemo_items = sum(1 for _ in dataset)

    report = json.loads((long_run / "report.json").read_text())
    kept_s = sum(line["duration"] for line in kept)
    figures = {
        "minutes": round(audio_s / 60, 2), "utterances": len(placed), "max_segment_s": args.max_segment_s,
        "phrases": report["new_utterances"], "phrases_kept": report["kept"], "phrase_keep_rate":
        round(report["keep_rate"], 4), "segments_written": len(kept), "kept_audio_share": round(kept_s / audio_s, 4),
        "longest_segment_s": round(longest, 3), "median_segment_s": round(sorted(
            line["duration"] for line in kept)[len(kept) // 2], 2) if kept else None,
        "unplaced_utterances": len(unplaced),
        "wer_one_by_one": round(one_by_one_wer, 2), "wer_one_by_one_kept": round(one_by_one_kept_wer, 2),
        "wer_segments_all": round(all_wer, 2), "wer_segments_kept": round(kept_wer, 2),
        "kept_minus_one_by_one": round(kept_wer - one_by_one_wer, 2),
        "read_back": {"train_json": len(kept), "shar_cuts": len(shar), "tarred_manifest": len(tarred_lines),
                      "tarred_shards": shards, "nemo_tarred_items": nemo_items},
        "job_s": {"one_by_one": round(short_s, 1), "recording": round(long_s, 1)},
        "machine": machine(),
    }
    print(f"\n{'':<34} {'WER %':>7} {'utterances':>11}")
    print(f"{'one by one, all':<34} {one_by_one_wer:>7.2f} {len(placed):>11}")
    print(f"{'one by one, kept':<34} {one_by_one_kept_wer:>7.2f} "
          f"{sum(u['path'] in kept_alone for u in placed):>11}")
    print(f"{'segments and rejected phrases, all':<34} {all_wer:>7.2f} {len(segments):>11}")
    print(f"{'segments, kept':<34} {kept_wer:>7.2f} {len(kept):>11}")
    print(f"\n{report['kept']} of {report['new_utterances']} phrases kept ({report['keep_rate']:.1%}), packed into "
          f"{len(kept)} segments holding {kept_s / audio_s:.1%} of the recording")
    print(f"\nlongest segment {longest:.2f} s (cap {args.max_segment_s:g}); {len(unplaced)} utterances in no segment; "
          f"read back: train.json {len(kept)}, Shar {len(shar)}, NeMo tarred {nemo_items} in {shards} shard(s)")
    print(f"command: python benchmarks/pseudo_label_segments.py{' --quick' if args.quick else ''}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
