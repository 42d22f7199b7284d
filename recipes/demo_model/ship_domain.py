"""Copy the domain LM text and part of the synthesized domain test set into the repository (`samples/domain/`).

    python ship_domain.py --data-dir /root/loopscribe-data --out ../../samples/domain

What a user needs to measure LM biasing without the recipe's corpus: the LM training text (`lm_text.txt`,
6,000 banking and device-command sentences), a dev set to tune the LM weight on and a test set to report,
both as 16-bit FLAC with NeMo manifests whose `audio_filepath` is relative to the manifest. The recipe's
`domain_test.json` has 300 utterances (18 MB as FLAC); its first 100 become `test.json` and the next 50
`dev.json` (9 MB together). All 300 are distinct sentences, none in the LM text or the training text, and
half of each set is read by voices never heard in training (`voice_seen`).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import soundfile

SPLITS = {"test": range(0, 100), "dev": range(100, 150)}
KEYS = ("duration", "text", "voice", "voice_seen", "speed_wpm", "pitch", "noise", "snr_db")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="/root/loopscribe-data")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "samples" / "domain"))
    args = parser.parse_args()
    data, out = Path(args.data_dir), Path(args.out)
    rows = [json.loads(line) for line in (data / "manifests" / "domain_test.json").read_text().splitlines()]
    (out / "audio").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(data / "text" / "domain_text.txt", out / "lm_text.txt")
    for split, indices in SPLITS.items():
        lines = []
        for index in indices:
            row = rows[index]
            audio, sample_rate = soundfile.read(row["audio_filepath"], dtype="int16")
            name = f"audio/{split}{index:03d}.flac"
            soundfile.write(out / name, audio, sample_rate, format="FLAC", subtype="PCM_16")
            lines.append(json.dumps({"audio_filepath": name, **{k: row[k] for k in KEYS if k in row}}))
        (out / f"{split}.json").write_text("\n".join(lines) + "\n")
        print(f"{split}: {len(lines)} utterances, {sum(rows[i]['duration'] for i in indices):.0f} s")


if __name__ == "__main__":
    main()
