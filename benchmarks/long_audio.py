"""Long recordings: chunked decoding (and local attention) against the same utterances decoded one by one.

A recording is made by joining the bundled test utterances (samples/ and samples/domain/audio, references in
their manifests) in a seeded random order, repeated as needed, with pauses of 0.3-1.5 s; each utterance's start
in it is known. It is written as a FLAC with a one-row manifest and run through the job's own stages
(`LoadAudio` -> `TranscribeBatch` -> `transcript_of`, no Ray), once per setting:

- WER against the references, next to the WER of the same utterances decoded one by one (short rows, the
  same stages); the difference is what decoding them as one recording costs;
- first-word timing: each utterance's first word as decoded alone, placed at its known start, is looked up in
  the recording's words (aligned by text); the share within 2 encoder frames of that position, and the mean
  offset in the first and last quarter of the recording (drift);
- RTFx of the ASR stage on the recording against on the short utterances (same audio seconds);
- peak resident memory of a process running the ASR stage on recordings of 1, 10 and 60 minutes (`--memory`),
  each in its own subprocess, sampled every 10 ms while the stage decodes (loading NeMo peaks higher: that is
  left out).

Settings: whole (no chunks, full attention: what loopscribe did before chunking), chunked with full attention
for several chunk lengths, and whole with local attention (NeMo's rel_pos_local_attn).

    python benchmarks/long_audio.py --quick            # a 4-minute recording, under a minute or two
    python benchmarks/long_audio.py --minutes 60 --memory

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._timing import machine  # noqa: E402
from pipeline import schema  # noqa: E402
from pipeline.config import BUNDLED_MODEL, REPOSITORY, LongAudioConfig, ModelConfig, ResourcesConfig  # noqa: E402
from pipeline.decoding import (  # noqa: E402
    DecodingConfig,
    plan_decoding,
    transcript_of,  # noqa: E402
)
from pipeline.io import read_manifest  # noqa: E402
from pipeline.model import (
    load_model,  # noqa: E402
    read_model_facts,  # noqa: E402
)
from pipeline.stages import (
    LoadAudio,  # noqa: E402
    TranscribeBatch,  # noqa: E402
)

SAMPLE_RATE = 16000
WHOLE_MINUTES = 10  # the longest recording decoded whole with full attention
MANIFESTS = (REPOSITORY / "samples" / "manifest.json", REPOSITORY / "samples" / "domain" / "test.json",
             REPOSITORY / "samples" / "domain" / "dev.json")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 4-minute recording, two settings")
    parser.add_argument("--minutes", type=float, default=20.0, help="length of the recording")
    parser.add_argument("--chunks", default="15,30,60", help="chunk lengths in seconds to compare")
    parser.add_argument("--overlap-s", type=float, default=LongAudioConfig().overlap_s)
    parser.add_argument("--local-context", type=int, default=128)
    parser.add_argument("--strategy", default="greedy")
    parser.add_argument("--model", default=str(BUNDLED_MODEL))
    parser.add_argument("--memory", action="store_true", help="peak memory at 1, 10 and 60 minutes")
    parser.add_argument("--memory-run", nargs=3, metavar=("TABLE", "CHUNK_S", "ATTENTION"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.chunks = 4.0, "30"
    return args


def normalise(text: str) -> str:
    """Lower case, words of letters, digits and apostrophes: how references and transcripts are compared."""
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", (text or "").lower()).split())


def utterances() -> list[dict]:
    import soundfile

    rows = []
    for manifest in MANIFESTS:
        for entry in read_manifest(str(manifest)):
            samples, rate = soundfile.read(entry[schema.AUDIO_FILEPATH], dtype="float32")
            assert rate == SAMPLE_RATE and samples.ndim == 1, entry[schema.AUDIO_FILEPATH]
            rows.append({"path": entry[schema.AUDIO_FILEPATH], "text": normalise(entry[schema.REFERENCE_TEXT]),
                         "samples": samples})
    return rows


def build_recording(pool: list[dict], minutes: float, seed: int) -> tuple[np.ndarray, list[dict]]:
    """The utterances joined in a random order (repeated as needed) with pauses of 0.3-1.5 s of quiet noise;
    each placed utterance with its start in seconds."""
    rng = np.random.default_rng(seed)
    pieces, placed, position = [], [], 0
    target = int(minutes * 60 * SAMPLE_RATE)
    while position < target:
        for index in rng.permutation(len(pool)):
            pause = np.float32(1e-3) * rng.standard_normal(int(rng.uniform(0.3, 1.5) * SAMPLE_RATE)).astype(np.float32)
            pieces.append(pause)
            position += len(pause)
            placed.append({**pool[index], "start_s": position / SAMPLE_RATE})
            pieces.append(pool[index]["samples"])
            position += len(pool[index]["samples"])
            if position >= target:
                break
    return np.concatenate(pieces), placed


class Decoder:
    """The job's stages in this process, for one setting."""

    def __init__(self, model_uri: str, strategy: str, long_audio: LongAudioConfig, loaded=None,
                 chunked_read: bool = True) -> None:
        self.model_config = ModelConfig(uri=model_uri)
        self.plan = plan_decoding(read_model_facts(model_uri), DecodingConfig(strategy=strategy))
        load = (lambda *_: loaded) if loaded is not None else load_model
        self.audio = LoadAudio(SAMPLE_RATE, long_audio=long_audio if chunked_read else LongAudioConfig(0))
        self.asr = TranscribeBatch(self.model_config, self.plan, ResourcesConfig(), long_audio=long_audio,
                                          load=load)

    def __call__(self, manifest: Path) -> tuple[list, float]:
        import pyarrow as pa

        table = pa.Table.from_pylist(list(read_manifest(str(manifest))), schema=schema.INPUT_SCHEMA)
        table = self.audio(table)
        started = time.perf_counter()
        decoded = self.asr(table)
        asr_s = time.perf_counter() - started
        errors = [e for e in decoded.column(schema.ERROR).to_pylist() if e]
        assert not errors, errors
        columns = [decoded.column(c).to_pylist() for c in (schema.TOKENS, schema.TOKEN_FRAMES,
                                                           schema.TOKEN_DURATIONS, schema.SCORE)]
        model = self.asr.model
        return [transcript_of(model, self.plan.span_kind, *values) for values in zip(*columns)], asr_s


def wer(references: list[str], hypotheses: list[str]) -> float:
    import jiwer

    return 100 * jiwer.wer(" ".join(references), " ".join(hypotheses))


def first_word_offsets(placed: list[dict], alone: list, long_words: list, frame_s: float) -> list[tuple[float, float]]:
    """(known start s, offset in frames) of each utterance whose first word, as decoded alone and placed at its
    known start, is found in the recording's words (aligned by text)."""
    expected, first_of = [], {}
    for number, (utterance, transcript) in enumerate(zip(placed, alone)):
        for position, word in enumerate(transcript.words):
            if position == 0:
                first_of[len(expected)] = number
            expected.append((normalise(word.text), utterance["start_s"] + word.start_s))
    got = [(normalise(w.text), w.start_s) for w in long_words]
    matcher = difflib.SequenceMatcher(a=[w for w, _ in expected], b=[w for w, _ in got], autojunk=False)
    offsets = []
    for block in matcher.get_matching_blocks():
        for i in range(block.size):
            if block.a + i in first_of:
                known = expected[block.a + i][1]
                offsets.append((known, (got[block.b + i][1] - known) / frame_s))
    return offsets


def peak_memory_mb(flac: Path, chunk_s: float, attention: str, model: str) -> float:
    """Peak RSS of a fresh process while it runs the ASR stage (only) on one recording: the audio stage's output
    (no samples: the ASR stage reads the chunks) is made here and handed over as a file."""
    import pyarrow as pa
    import pyarrow.feather as feather
    import soundfile

    manifest = flac.with_suffix(".json")
    manifest.write_text(json.dumps({"audio_filepath": str(flac), "duration": soundfile.info(flac).duration}) + "\n")
    table = pa.Table.from_pylist(list(read_manifest(str(manifest))), schema=schema.INPUT_SCHEMA)
    audio = LoadAudio(SAMPLE_RATE, long_audio=LongAudioConfig(chunk_s=chunk_s, attention=attention))(table)
    feather.write_feather(audio, flac.with_suffix(".arrow"))
    run = subprocess.run([sys.executable, __file__, "--memory-run", str(flac.with_suffix(".arrow")), str(chunk_s),
                          attention, "--model", model], capture_output=True, text=True, timeout=3600)
    if run.returncode:
        raise RuntimeError(run.stderr[-2000:])
    return float(run.stdout.strip().splitlines()[-1])


def memory_run(table_path: str, chunk_s: float, attention: str, model: str) -> None:
    import pyarrow.feather as feather

    long_audio = LongAudioConfig(chunk_s=chunk_s, attention=attention)
    plan = plan_decoding(read_model_facts(model), DecodingConfig())
    stage = TranscribeBatch(ModelConfig(uri=model), plan, ResourcesConfig(), long_audio=long_audio)
    stage._ensure_loaded()  # loading NeMo peaks higher than decoding: the peak measured is the call's alone
    table = feather.read_table(table_path)
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            with open("/proc/self/statm") as handle:
                peak[0] = max(peak[0], int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    decoded = stage(table)
    done.set()
    sampler.join()
    assert decoded.column(schema.STATUS).to_pylist() == ["ok"], decoded.column(schema.ERROR).to_pylist()
    print(peak[0] / 2**20)


def main() -> None:
    args = parse_args()
    if args.memory_run:
        memory_run(args.memory_run[0], float(args.memory_run[1]), args.memory_run[2], args.model)
        return
    import soundfile
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 2)))
    pool = utterances()
    samples, placed = build_recording(pool, args.minutes, args.seed)
    minutes = len(samples) / SAMPLE_RATE / 60
    folder = Path(tempfile.mkdtemp(prefix="long-audio-"))
    flac = folder / "recording.flac"
    soundfile.write(flac, samples, SAMPLE_RATE)
    (folder / "long.json").write_text(json.dumps({"audio_filepath": str(flac),
                                                  "duration": len(samples) / SAMPLE_RATE}) + "\n")
    (folder / "short.json").write_text("".join(json.dumps({"audio_filepath": u["path"], "duration":
                                                           len(u["samples"]) / SAMPLE_RATE}) + "\n" for u in placed))
    references = [u["text"] for u in placed]
    print(f"recording: {minutes:.1f} min, {len(placed)} utterances ({folder})", flush=True)

    model = load_model(ModelConfig(uri=args.model), "cpu")
    short = Decoder(args.model, args.strategy, LongAudioConfig(), loaded=model)
    (folder / "warm-up.json").write_text("".join((folder / "short.json").read_text().splitlines(True)[:16]))
    short(folder / "warm-up.json")  # torch's first calls: not part of any setting's time
    alone, short_s = short(folder / "short.json")
    short_wer = wer(references, [normalise(t.text) for t in alone])
    audio_s = len(samples) / SAMPLE_RATE
    frame_s = model.frame_shift_s
    settings = [(f"chunks of {c:g} s", LongAudioConfig(chunk_s=float(c), overlap_s=args.overlap_s))
                for c in map(float, args.chunks.split(","))]
    if not args.quick and minutes <= WHOLE_MINUTES:
        settings += [("whole, full attention", LongAudioConfig(chunk_s=0))]
    elif not args.quick:  # its attention matrices grow with the square of the length: 20 minutes was killed (24 GB)
        print(f"whole, full attention: not run past {WHOLE_MINUTES} minutes (memory grows with the square of the "
              "length; 20 minutes ran this 24 GB machine out of memory)")
    if minutes <= WHOLE_MINUTES:  # local attention's memory is linear, but the subsampling convolutions of a
        # whole hour still take tens of GB (they run on every feature frame at once)
        settings += [(f"whole, local attention {args.local_context}",
                      LongAudioConfig(chunk_s=0, attention="local", local_context=args.local_context))]
    figures = {"minutes": round(minutes, 2), "utterances": len(placed), "strategy": args.strategy,
               "short": {"wer": round(short_wer, 2), "rtfx": round(audio_s / short_s, 1)}, "settings": {}}
    print(f"\n{'setting':<30} {'WER %':>7} {'vs 1-by-1':>9} {'first word <=2 fr':>17} {'drift fr':>9} "
          f"{'RTFx':>7} {'vs short':>8}")
    print(f"{'utterances one by one':<30} {short_wer:>7.2f} {'':>9} {'':>17} {'':>9} {audio_s / short_s:>7.1f}")
    for name, long_audio in settings:
        if long_audio.attention == "local":  # a fresh model: local attention changes the encoder in place
            loaded = load_model(ModelConfig(uri=args.model), "cpu")
        else:
            loaded = model
        try:
            (transcript,), long_s = Decoder(args.model, args.strategy, long_audio, loaded=loaded)(folder / "long.json")
        except Exception as error:  # e.g. out of memory for a whole hour with full attention
            print(f"{name:<30} failed: {type(error).__name__}: {str(error)[:80]}")
            figures["settings"][name] = {"error": f"{type(error).__name__}: {error}"[:300]}
            continue
        long_wer = wer(references, [normalise(transcript.text)])
        offsets = first_word_offsets(placed, alone, transcript.words, frame_s)
        within = sum(abs(o) <= 2 for _, o in offsets) / len(placed)
        quarter = audio_s / 4
        early = [o for t, o in offsets if t < quarter]
        late = [o for t, o in offsets if t >= 3 * quarter]
        drift = (float(np.median(late)) - float(np.median(early))) if early and late else float("nan")
        rtfx = audio_s / long_s
        print(f"{name:<30} {long_wer:>7.2f} {long_wer - short_wer:>+9.2f} {100 * within:>16.1f}% {drift:>+9.2f} "
              f"{rtfx:>7.1f} {rtfx / (audio_s / short_s):>7.2f}x", flush=True)
        figures["settings"][name] = {"wer": round(long_wer, 2), "wer_minus_one_by_one": round(long_wer - short_wer, 2),
                                     "first_word_within_2_frames": round(within, 4),
                                     "drift_frames": round(drift, 2), "rtfx": round(rtfx, 1),
                                     "rtfx_vs_short": round(rtfx / (audio_s / short_s), 3)}
    if args.memory:
        memory = {}
        print(f"\n{'peak RSS of the ASR stage, MB':<30} " + " ".join(f"{m:>6} min" for m in (1, 10, 60)))
        for name, chunk_s, attention in (("chunks of 30 s", 30.0, "full"),):
            row = {}
            for m in (1, 10, 60):
                path = folder / f"memory-{m}.flac"
                if not path.exists():
                    soundfile.write(path, np.resize(samples, m * 60 * SAMPLE_RATE), SAMPLE_RATE)
                row[m] = round(peak_memory_mb(path, chunk_s, attention, args.model), 1)
            memory[name] = row
            print(f"{name:<30} " + " ".join(f"{row[m]:>10.0f}" for m in (1, 10, 60)) +
                  f"   60/1: {row[60] / row[1]:.2f}x", flush=True)
        figures["peak_rss_mb"] = memory
    figures["machine"] = machine("cpu")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
