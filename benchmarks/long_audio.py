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

Settings: cut by voice activity (`--segment vad`, the default, and two of its settings), chunked at pauses
(`--segment pauses`) for several chunk lengths, whole (no chunks, full attention: what loopscribe did before
chunking), fixed chunks (`--segment none`) and whole with local attention (NeMo's rel_pos_local_attn); each with
the share of its audio decoded and, beside first words found by text, the share of utterances where some word starts
within 0.3 s of where the first word falls (timing alone).

A second recording is the first with `--non-speech` (30%) of non-speech inserted (music-like chords, white noise,
digital silence, in turn): WER, the words that start inside the non-speech, and the share decoded, for the VAD and
pause settings. With `--s3`, the row is stored as a 16-bit WAV in moto S3 behind a proxy that counts the bytes the
server sends (tests/support/counting_proxy.py), and the stages' reads are reported as a multiple of the file.

    python benchmarks/long_audio.py --quick            # a 4-minute recording, a few minutes
    python benchmarks/long_audio.py --quick --minutes 10 --s3    # docs/long_audio.md's VAD figures
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
    parser.add_argument("--minutes", type=float, default=None, help="length of the recording (default: 20; 4 with "
                                                                     "--quick)")
    parser.add_argument("--chunks", default="15,30,60", help="chunk lengths in seconds to compare")
    parser.add_argument("--overlap-s", type=float, default=LongAudioConfig().overlap_s)
    parser.add_argument("--local-context", type=int, default=128)
    parser.add_argument("--strategy", default="greedy")
    parser.add_argument("--model", default=str(BUNDLED_MODEL))
    parser.add_argument("--memory", action="store_true", help="peak memory at 1, 10 and 60 minutes")
    parser.add_argument("--memory-run", nargs=3, metavar=("TABLE", "CHUNK_S", "ATTENTION"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--non-speech", type=float, default=0.3,
                        help="share of non-speech (tones, noise, silence) in the second recording; 0: none")
    parser.add_argument("--s3", action="store_true", help="bytes read from S3 (moto) for the row, vad and pauses")
    args = parser.parse_args()
    if args.quick:
        args.chunks = "30"
    if args.minutes is None:
        args.minutes = 4.0 if args.quick else 20.0
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
        # the share of the audio decoded: the speech segments' where the row was cut by voice activity, else all
        shares = decoded.column(schema.SPEECH_SHARE).to_pylist()
        seconds = decoded.column(schema.AUDIO_DURATION).to_pylist()
        self.decoded_share = sum((1.0 if share is None else share) * s for share, s in zip(shares, seconds)) / sum(
            seconds)
        columns = [decoded.column(c).to_pylist() for c in (schema.TOKENS, schema.TOKEN_FRAMES,
                                                           schema.TOKEN_DURATIONS, schema.SCORE)]
        model = self.asr.model
        return [transcript_of(model, self.plan.span_kind, *values) for values in zip(*columns)], asr_s


NON_SPEECH_KINDS = ("tones", "noise", "silence")


def non_speech(kind: str, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Music-like tones (three-note chords changing every 0.4 s), white noise, or digital silence."""
    length = int(seconds * SAMPLE_RATE)
    if kind == "noise":
        return (0.05 * rng.standard_normal(length)).astype(np.float32)
    if kind == "silence":
        return np.zeros(length, np.float32)
    t = np.arange(length) / SAMPLE_RATE
    notes = 220 * 2 ** (rng.integers(0, 12, (int(seconds / 0.4) + 1, 3)) / 12)
    return (0.05 * np.sin(2 * np.pi * notes[(t / 0.4).astype(int)] * t[:, None]).sum(axis=1)).astype(np.float32)


def with_non_speech(samples: np.ndarray, placed: list[dict], share: float, seed: int
                    ) -> tuple[np.ndarray, list[dict], list[tuple[float, float, str]]]:
    """`samples` with stretches of non-speech (4-10 s, the kinds in turn) inserted before utterances until they are
    `share` of the whole: (samples, the utterances at their new starts, the stretches as (start s, end s, kind))."""
    rng = np.random.default_rng(seed + 1)
    speech_samples = len(samples)
    target = int(share / (1 - share) * speech_samples)
    starts = [int(u["start_s"] * SAMPLE_RATE) for u in placed]
    every = max(1, round(len(placed) / max(1, target / (7 * SAMPLE_RATE))))
    pieces, stretches, moved, inserted, previous = [], [], [], 0, 0
    for number, (utterance, start) in enumerate(zip(placed, starts)):
        if number % every == every - 1 and inserted < target:
            pieces.append(samples[previous: start - SAMPLE_RATE // 4])  # inside the pause before the utterance
            previous = start - SAMPLE_RATE // 4
            kind = NON_SPEECH_KINDS[len(stretches) % 3]
            stretch = non_speech(kind, min(rng.uniform(4, 10), (target - inserted) / SAMPLE_RATE + 0.5), rng)
            begin = (previous + inserted) / SAMPLE_RATE
            stretches.append((begin, begin + len(stretch) / SAMPLE_RATE, kind))
            pieces.append(stretch)
            inserted += len(stretch)
        moved.append({**utterance, "start_s": (start + inserted) / SAMPLE_RATE})
    pieces.append(samples[previous:])
    return np.concatenate(pieces), moved, stretches


def words_inside(words: list, stretches: list[tuple[float, float, str]], margin_s: float = 0.2) -> list:
    """The words that start inside a non-speech stretch (more than `margin_s` from its edges)."""
    return [w for w in words if any(low + margin_s < w.start_s < high - margin_s for low, high, _ in stretches)]


def s3_bytes_read(flac_samples: np.ndarray, folder: Path, model_uri: str, strategy: str, loaded,
                  settings: list[tuple[str, LongAudioConfig]]) -> dict[str, float]:
    """Bytes fetched from S3 (moto, behind a counting proxy: tests/support/counting_proxy.py) by the audio and ASR
    stages for one long row stored as 16-bit WAV, per setting, as a multiple of the file's size."""
    import logging

    import boto3
    import s3fs
    import soundfile

    from tests.support.counting_proxy import CountingProxy
    from tests.support.s3_server import moto_s3

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's server: a line per request
    path = folder / "s3-recording.wav"
    soundfile.write(path, flac_samples, SAMPLE_RATE, subtype="PCM_16")
    size = path.stat().st_size
    ratios = {}
    with moto_s3("audio") as endpoint:
        boto3.client("s3", endpoint_url=endpoint).upload_file(str(path), "audio", "long.wav")
        proxy = CountingProxy(endpoint)
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
        s3fs.S3FileSystem.clear_instance_cache()
        manifest = folder / "s3.json"
        manifest.write_text(json.dumps({"audio_filepath": "s3://audio/long.wav",
                                        "duration": len(flac_samples) / SAMPLE_RATE}) + "\n")
        for name, long_audio in settings:
            before = proxy.received
            Decoder(model_uri, strategy, long_audio, loaded=loaded)(manifest)
            ratios[name] = (proxy.received - before) / size
        proxy.close()
    return ratios


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


def first_words_on_time(placed: list[dict], alone: list, long_words: list, tolerance_s: float = 0.3) -> float:
    """The share of utterances where some word of the recording starts within `tolerance_s` of where the
    utterance's first word falls (its start when decoded alone, placed at the utterance's known start), whatever
    its text: timing alone, where `first_word_offsets` also needs the word decoded the same."""
    starts = np.sort(np.array([w.start_s for w in long_words])) if long_words else np.zeros(0)
    hits = 0
    for utterance, transcript in zip(placed, alone):
        if not transcript.words or not len(starts):
            continue
        expected = utterance["start_s"] + transcript.words[0].start_s
        position = np.searchsorted(starts, expected)
        nearest = min(abs(starts[k] - expected) for k in (position - 1, position) if 0 <= k < len(starts))
        hits += nearest <= tolerance_s
    return hits / len(placed)


def peak_memory_mb(flac: Path, chunk_s: float, attention: str, model: str) -> float:
    """Peak RSS of a fresh process while it runs the ASR stage (only) on one recording: the audio stage's output
    (no samples: the ASR stage reads the chunks) is made here and handed over as a file."""
    import pyarrow as pa
    import pyarrow.feather as feather
    import soundfile

    manifest = flac.with_suffix(".json")
    manifest.write_text(json.dumps({"audio_filepath": str(flac), "duration": soundfile.info(flac).duration}) + "\n")
    table = pa.Table.from_pylist(list(read_manifest(str(manifest))), schema=schema.INPUT_SCHEMA)
    audio = LoadAudio(SAMPLE_RATE, long_audio=LongAudioConfig(chunk_s=chunk_s, attention=attention,
                                                              segment="pauses"))(table)
    feather.write_feather(audio, flac.with_suffix(".arrow"))
    run = subprocess.run([sys.executable, __file__, "--memory-run", str(flac.with_suffix(".arrow")), str(chunk_s),
                          attention, "--model", model], capture_output=True, text=True, timeout=3600)
    if run.returncode:
        raise RuntimeError(run.stderr[-2000:])
    return float(run.stdout.strip().splitlines()[-1])


def memory_run(table_path: str, chunk_s: float, attention: str, model: str) -> None:
    import pyarrow.feather as feather

    long_audio = LongAudioConfig(chunk_s=chunk_s, attention=attention, segment="pauses")
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
    vad = LongAudioConfig(overlap_s=args.overlap_s)
    settings = [("vad segments (default)", vad),
                ("vad, --speech-pad-s 0", LongAudioConfig(overlap_s=args.overlap_s, speech_pad_s=0.0)),
                ("vad, --vad-threshold 0.7", LongAudioConfig(overlap_s=args.overlap_s, vad_threshold=0.7))]
    settings += [(f"pauses, chunks of {c:g} s", LongAudioConfig(chunk_s=float(c), overlap_s=args.overlap_s,
                                                                segment="pauses"))
                 for c in map(float, args.chunks.split(","))]
    if not args.quick and minutes <= WHOLE_MINUTES:
        settings += [("whole, full attention", LongAudioConfig(chunk_s=0))]
        settings += [("none: fixed 30 s chunks", LongAudioConfig(segment="none", overlap_s=args.overlap_s))]
    elif not args.quick:  # its attention matrices grow with the square of the length: 20 minutes was killed (24 GB)
        print(f"whole, full attention: not run past {WHOLE_MINUTES} minutes (memory grows with the square of the "
              "length; 20 minutes ran this 24 GB machine out of memory)")
    # local attention's memory is linear, but the subsampling convolutions of a whole hour still take tens of GB
    # (they run on every feature frame at once)
    if minutes <= WHOLE_MINUTES and not args.quick:
        settings += [(f"whole, local attention {args.local_context}",
                      LongAudioConfig(chunk_s=0, attention="local", local_context=args.local_context))]
    figures = {"minutes": round(minutes, 2), "utterances": len(placed), "strategy": args.strategy,
               "short": {"wer": round(short_wer, 2), "rtfx": round(audio_s / short_s, 1)}, "settings": {}}
    print(f"\n{'setting':<30} {'WER %':>7} {'vs 1-by-1':>9} {'first word <=2 fr':>17} {'<=0.3 s':>8} "
          f"{'a word <=0.3 s':>14} {'drift fr':>9} {'RTFx':>7} {'vs short':>8} {'decoded':>8}")
    print(f"{'utterances one by one':<30} {short_wer:>7.2f} {'':>9} {'':>17} {'':>9} {audio_s / short_s:>7.1f}")
    for name, long_audio in settings:
        if long_audio.attention == "local":  # a fresh model: local attention changes the encoder in place
            loaded = load_model(ModelConfig(uri=args.model), "cpu")
        else:
            loaded = model
        decoder = Decoder(args.model, args.strategy, long_audio, loaded=loaded)
        try:
            (transcript,), long_s = decoder(folder / "long.json")
        except Exception as error:  # e.g. out of memory for a whole hour with full attention
            print(f"{name:<30} failed: {type(error).__name__}: {str(error)[:80]}")
            figures["settings"][name] = {"error": f"{type(error).__name__}: {error}"[:300]}
            continue
        long_wer = wer(references, [normalise(transcript.text)])
        offsets = first_word_offsets(placed, alone, transcript.words, frame_s)
        within = sum(abs(o) <= 2 for _, o in offsets) / len(placed)
        within_s = sum(abs(o) * frame_s <= 0.3 for _, o in offsets) / len(placed)
        on_time = first_words_on_time(placed, alone, transcript.words)
        quarter = audio_s / 4
        early = [o for t, o in offsets if t < quarter]
        late = [o for t, o in offsets if t >= 3 * quarter]
        drift = (float(np.median(late)) - float(np.median(early))) if early and late else float("nan")
        rtfx = audio_s / long_s
        print(f"{name:<30} {long_wer:>7.2f} {long_wer - short_wer:>+9.2f} {100 * within:>16.1f}% "
              f"{100 * within_s:>7.1f}% {100 * on_time:>13.1f}% {drift:>+9.2f} {rtfx:>7.1f} "
              f"{rtfx / (audio_s / short_s):>7.2f}x {decoder.decoded_share:>8.2f}", flush=True)
        figures["settings"][name] = {"wer": round(long_wer, 2), "wer_minus_one_by_one": round(long_wer - short_wer, 2),
                                     "first_word_within_2_frames": round(within, 4),
                                     "first_word_within_0_3_s": round(within_s, 4),
                                     "a_word_within_0_3_s_of_each_first": round(on_time, 4),
                                     "decoded_share": round(decoder.decoded_share, 3),
                                     "drift_frames": round(drift, 2), "rtfx": round(rtfx, 1),
                                     "rtfx_vs_short": round(rtfx / (audio_s / short_s), 3)}
    if args.non_speech:
        mixed, moved, stretches = with_non_speech(samples, placed, args.non_speech, args.seed)
        mixed_path = folder / "non-speech.flac"
        soundfile.write(mixed_path, mixed, SAMPLE_RATE)
        (folder / "non-speech.json").write_text(json.dumps({"audio_filepath": str(mixed_path),
                                                            "duration": len(mixed) / SAMPLE_RATE}) + "\n")
        share = sum(high - low for low, high, _ in stretches) / (len(mixed) / SAMPLE_RATE)
        print(f"\nrecording with {100 * share:.0f}% non-speech ({len(stretches)} stretches of tones, noise and "
              f"silence), {len(mixed) / SAMPLE_RATE / 60:.1f} min")
        print(f"{'setting':<30} {'WER %':>7} {'vs 1-by-1':>9} {'words in non-speech':>20} {'decoded':>8} {'RTFx':>7}")
        figures["non_speech"] = {"share": round(share, 3), "stretches": len(stretches), "settings": {}}
        for name, long_audio in (*settings[:3],
                                 ("pauses, chunks of 30 s", LongAudioConfig(overlap_s=args.overlap_s,
                                                                            segment="pauses"))):
            decoder = Decoder(args.model, args.strategy, long_audio, loaded=model)
            (transcript,), long_s = decoder(folder / "non-speech.json")
            mixed_wer = wer([u["text"] for u in moved], [normalise(transcript.text)])
            inside = words_inside(transcript.words, stretches)
            rtfx = len(mixed) / SAMPLE_RATE / long_s
            print(f"{name:<30} {mixed_wer:>7.2f} {mixed_wer - short_wer:>+9.2f} {len(inside):>20} "
                  f"{decoder.decoded_share:>8.2f} {rtfx:>7.1f}", flush=True)
            figures["non_speech"]["settings"][name] = {
                "wer": round(mixed_wer, 2), "words_in_non_speech": len(inside),
                "words_in_non_speech_by_kind": {kind: sum(any(low + 0.2 < w.start_s < high - 0.2 for low, high, k
                                                              in stretches if k == kind) for w in inside)
                                                for kind in NON_SPEECH_KINDS},
                "decoded_share": round(decoder.decoded_share, 3), "rtfx": round(rtfx, 1)}
    if args.s3:
        ratios = s3_bytes_read(samples, folder, args.model, args.strategy, model,
                               [("vad segments (default)", vad),
                                ("pauses, chunks of 30 s", LongAudioConfig(overlap_s=args.overlap_s,
                                                                           segment="pauses"))])
        print(f"\nbytes fetched from S3 (moto) for the {minutes:.1f}-minute row, as a multiple of its 16-bit WAV: "
              + ", ".join(f"{name}: {ratio:.2f}x" for name, ratio in ratios.items()))
        figures["s3_bytes_read_vs_file"] = {name: round(ratio, 3) for name, ratio in ratios.items()}
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
