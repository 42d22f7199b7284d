"""Synthesize transcripts with espeak-ng into 16 kHz WAV files and a NeMo manifest.

Each utterance gets a random English accent, a voice variant from the espeak-ng voices directory, a speed
(120-230 words per minute), a pitch, and added noise (white, pink or brown, 8-40 dB SNR, or none).
Some variants are held out of training: `--voices train` never uses them, `--voices test` uses a held-out
variant for every second utterance and a training variant for the others, and the manifest says which
(`voice_seen`), so accuracy on unseen voices can be read separately.

    python synthesize.py --text /root/loopscribe-data/text/train.txt --split train --limit 24000 --voices train

Writes /root/loopscribe-data/audio/<split>/<n>.wav and /root/loopscribe-data/manifests/<split>.json
(JSON lines: audio_filepath, duration, text, voice, speed_wpm, pitch, snr_db, voice_seen).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import soundfile
import soxr

ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-us-nyc", "en-gb-x-gbclan", "en-gb-x-gbcwmd")
VARIANTS_DIR = Path("/usr/lib/x86_64-linux-gnu/espeak-ng-data/voices/!v")
# zac and robosoft* take seconds per sentence; names with spaces cannot be passed after "+"
SLOW_VARIANTS = {"zac", "robosoft", "robosoft2", "robosoft3", "robosoft4", "robosoft5", "robosoft6", "robosoft7",
                 "robosoft8"}
# ordinary-sounding variants kept out of training so the test set measures voices the model never heard
HELD_OUT_VARIANTS = ("m4", "f4", "Andy", "belinda", "david", "steph2", "klatt3", "iven3", "Hugo", "aunty")
SAMPLE_RATE = 16000
ESPEAK_RATE = 22050


def all_variants() -> list[str]:
    names = sorted(p.name for p in VARIANTS_DIR.iterdir() if p.is_file() and " " not in p.name)
    return [n for n in names if n not in SLOW_VARIANTS]


def noise(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    white = rng.standard_normal(n)
    if kind == "white":
        return white
    spectrum = np.fft.rfft(white)
    freqs = np.maximum(np.fft.rfftfreq(n), 1.0 / n)
    spectrum /= np.sqrt(freqs) if kind == "pink" else freqs
    colored = np.fft.irfft(spectrum, n)
    return colored / (colored.std() + 1e-9)


def synthesize_one(job: dict) -> dict | None:
    rng = np.random.default_rng(job["seed"])
    with tempfile.NamedTemporaryFile(suffix=".wav", dir=job["tmp_dir"]) as tmp:
        command = ["espeak-ng", "-v", f"{job['accent']}+{job['variant']}", "-s", str(job["speed_wpm"]),
                   "-p", str(job["pitch"]), "-w", tmp.name, job["text"]]
        result = subprocess.run(command, capture_output=True)
        if result.returncode != 0:
            return None
        audio, rate = soundfile.read(tmp.name, dtype="float32")
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    audio = soxr.resample(audio, rate, SAMPLE_RATE)
    # trim espeak's long trailing silence to a random 50-300 ms so utterance ends vary
    voiced = np.nonzero(np.abs(audio) > 1e-3)[0]
    if len(voiced) == 0:
        return None
    start = max(0, voiced[0] - int(rng.uniform(0.05, 0.3) * SAMPLE_RATE))
    end = min(len(audio), voiced[-1] + int(rng.uniform(0.05, 0.3) * SAMPLE_RATE))
    audio = audio[start:end]
    if job["snr_db"] is not None:
        signal_power = float(np.mean(audio[voiced[0] - start : voiced[-1] - start] ** 2)) + 1e-12
        audio = audio + noise(job["noise"], len(audio), rng) * np.sqrt(signal_power / 10 ** (job["snr_db"] / 10))
    peak = float(np.max(np.abs(audio))) + 1e-9
    audio = audio / peak * 10 ** (job["gain_db"] / 20)
    soundfile.write(job["audio_filepath"], audio, SAMPLE_RATE, subtype="PCM_16")
    return {
        "audio_filepath": job["audio_filepath"],
        "duration": round(len(audio) / SAMPLE_RATE, 3),
        "text": job["text"],
        "voice": f"{job['accent']}+{job['variant']}",
        "speed_wpm": job["speed_wpm"],
        "pitch": job["pitch"],
        "snr_db": job["snr_db"],
        "noise": job["noise"] if job["snr_db"] is not None else None,
        "voice_seen": job["voice_seen"],
    }


def plan(texts: list[str], voices: str, split: str, audio_dir: Path, tmp_dir: str, seed: int) -> list[dict]:
    rng = random.Random(f"{seed}-{split}")
    variants = all_variants()
    train_variants = [v for v in variants if v not in HELD_OUT_VARIANTS]
    missing = [v for v in HELD_OUT_VARIANTS if v not in variants]
    if missing:
        sys.exit(f"held-out variants not in {VARIANTS_DIR}: {missing}")
    jobs = []
    for index, text in enumerate(texts):
        held_out = voices == "test" and index % 2 == 0
        has_noise = rng.random() < 0.85
        jobs.append({
            "text": text,
            "accent": rng.choice(ACCENTS),
            "variant": rng.choice(HELD_OUT_VARIANTS if held_out else train_variants),
            "voice_seen": not held_out,
            "speed_wpm": rng.randint(120, 230),
            "pitch": rng.randint(20, 80),
            "noise": rng.choice(("white", "pink", "brown")),
            "snr_db": round(rng.uniform(8, 40), 1) if has_noise else None,
            "gain_db": round(rng.uniform(-18, -1), 1),
            "seed": rng.getrandbits(32),
            "audio_filepath": str(audio_dir / f"{index:06d}.wav"),
            "tmp_dir": tmp_dir,
        })
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text", required=True, help="one transcript a line")
    parser.add_argument("--split", required=True, help="name of the output folder and manifest")
    parser.add_argument("--voices", choices=("train", "test"), default="train")
    parser.add_argument("--skip", type=int, default=0, help="leave out the first N lines")
    parser.add_argument("--limit", type=int, default=0, help="then use only the next N lines (0: all)")
    parser.add_argument("--data-dir", default="/root/loopscribe-data")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args()

    texts = [line.strip() for line in Path(args.text).read_text().splitlines() if line.strip()]
    texts = texts[args.skip :]
    if args.limit:
        texts = texts[: args.limit]
    audio_dir = Path(args.data_dir) / "audio" / args.split
    audio_dir.mkdir(parents=True, exist_ok=True)
    manifest_dir = Path(args.data_dir) / "manifests"
    manifest_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp_dir, Pool(args.processes) as pool:
        jobs = plan(texts, args.voices, args.split, audio_dir, tmp_dir, args.seed)
        entries = [e for e in pool.imap(synthesize_one, jobs, chunksize=16) if e is not None]
    manifest = manifest_dir / f"{args.split}.json"
    with open(manifest, "w") as f:
        for entry in entries:
            f.write(json.dumps(entry) + "\n")
    hours = sum(e["duration"] for e in entries) / 3600
    wall_s = time.time() - started
    print(f"{manifest}: {len(entries)} utterances ({len(texts) - len(entries)} failed), {hours:.2f} h of audio, "
          f"{wall_s:.0f} s wall, {hours * 3600 / wall_s:.0f}x real time")


if __name__ == "__main__":
    main()
