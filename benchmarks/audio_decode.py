"""Audio decoded per CPU core, as the job's audio actors decode it: the figure that sizes the CPUs beside a GPU.

The audio stage (`LoadAudio`: open, decode with libsndfile, slice, resample with soxr to 16 kHz) runs in this
process, one thread, over the repository's spoken files (samples/*.flac and samples/domain/audio/*, 170 files of
1.3-7 s, 9 minutes) in three forms a corpus comes in: FLAC at 16 kHz (no resampling), 16-bit WAV at 16 kHz, and
FLAC at 48 kHz (resampled to 16 kHz, as a podcast or video corpus is). The rate is audio seconds decoded per
second of this process's CPU time (the best of `--rounds`), so other load on the machine does not lower it; a GPU
whose encoder runs at R times real time needs about R / rate such cores for its audio alone (docs/gpu.md works
the sizing out).

    python benchmarks/audio_decode.py              # 3 rounds: about a minute on a 2-core CPU
    python benchmarks/audio_decode.py --rounds 1

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))


def spoken_files() -> list[Path]:
    """The repository's spoken samples: samples/*.flac, then samples/domain/audio/*."""
    return sorted((REPOSITORY / "samples").glob("*.flac")) + sorted((REPOSITORY / "samples/domain/audio").iterdir())


def corpus_forms(sources: list[Path], work: Path) -> dict[str, list[Path]]:
    """The sources as FLAC 16 kHz (as they are), WAV 16 kHz 16-bit, and FLAC 48 kHz (resampled up with soxr)."""
    import soundfile
    import soxr

    forms = {"flac_16k": list(sources), "wav_16k": [], "flac_48k": []}
    for name in ("wav_16k", "flac_48k"):
        (work / name).mkdir(parents=True, exist_ok=True)
    for index, path in enumerate(sources):
        audio, rate = soundfile.read(path, dtype="float32")
        wav = work / "wav_16k" / f"{index:03d}.wav"
        soundfile.write(wav, audio, rate, subtype="PCM_16")
        flac = work / "flac_48k" / f"{index:03d}.flac"
        soundfile.write(flac, np.clip(soxr.resample(audio, rate, 48000), -1, 1), 48000, subtype="PCM_16")
        forms["wav_16k"].append(wav)
        forms["flac_48k"].append(flac)
    return forms


def decode_rate(paths: list[Path], rounds: int = 3, sample_rate: int = 16000) -> dict[str, float]:
    """`LoadAudio` over `paths` in its batches of rows, in this thread: audio seconds, the best round's CPU and
    wall seconds, and audio seconds per CPU second (one core's rate)."""
    import pyarrow as pa
    import soundfile

    from pipeline import schema
    from pipeline.io import read_manifest
    from pipeline.stages import LoadAudio

    with tempfile.TemporaryDirectory(prefix="audio_decode_") as folder:
        manifest = Path(folder) / "manifest.json"
        manifest.write_text("".join(json.dumps({"audio_filepath": str(p), "duration": soundfile.info(p).duration})
                                    + "\n" for p in paths))
        rows = list(read_manifest(str(manifest)))
    tables = [pa.Table.from_pylist(rows[start:start + LoadAudio.BATCH_ROWS], schema=schema.INPUT_SCHEMA)
              for start in range(0, len(rows), LoadAudio.BATCH_ROWS)]
    stage = LoadAudio(sample_rate)
    best_cpu_s = best_wall_s = float("inf")
    audio_s = 0.0
    for _ in range(rounds):
        cpu, wall, audio_s = time.process_time(), time.perf_counter(), 0.0
        for table in tables:
            out = stage(table)
            audio_s += sum(len(samples) for samples in out.column(schema.SAMPLES).to_pylist()) / sample_rate
        best_cpu_s = min(best_cpu_s, time.process_time() - cpu)
        best_wall_s = min(best_wall_s, time.perf_counter() - wall)
    return {"files": len(paths), "audio_s": round(audio_s, 1), "cpu_s": round(best_cpu_s, 3),
            "wall_s": round(best_wall_s, 3), "audio_s_per_cpu_s": round(audio_s / best_cpu_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per form; the best is reported")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="audio_decode_forms_") as work:
        forms = corpus_forms(spoken_files(), Path(work))
        figures = {name: decode_rate(paths, args.rounds) for name, paths in forms.items()}
    print(f"LoadAudio, one thread, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; best of "
          f"{args.rounds} rounds; rate = audio s decoded per CPU s")
    print("| form | files | audio s | CPU s | wall s | audio s per CPU s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, row in figures.items():
        print(f"| {name} | {row['files']} | {row['audio_s']} | {row['cpu_s']} | {row['wall_s']} | "
              f"{row['audio_s_per_cpu_s']} |")
    command = f"python benchmarks/audio_decode.py {' '.join(sys.argv[1:])}".strip()
    print(f"command: {command}")
    print(json.dumps({"benchmark": "audio_decode", "command": command, "cpus": os.cpu_count(),
                      "processor": platform.processor() or platform.machine(), "forms": figures}))


if __name__ == "__main__":
    main()
