"""`jobs/pseudo_label.py` night after night, on an in-process Ray and a random NeMo model.

- 40 audio files, then the same 40 plus 20 new ones: the second run labels the 20 only, and every file is in
  exactly one run's manifests (kept or rejected).
- A run that died after writing its manifests but before `labelled.txt`: the next run removes it and labels
  its files, so each file is still in exactly one run's manifests.
- A file rewritten in place is labelled again (its id carries size and modification time).
- Manifests: NeMo JSON-lines with the pseudo-label and confidence, Lhotse cuts that lhotse loads, rejected
  lines with a reason; an unreadable file is a rejected line, not a crashed run.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from pipeline.labels.filters import LabelFilters, judge, longest_repeat

pytestmark = [pytest.mark.ray, pytest.mark.nemo, pytest.mark.slow]


@pytest.fixture(scope="module")
def nightly_bucket(s3):
    """The bucket `nightly` on the session's S3 server, which the session's Ray workers reach (tests/conftest.py)."""
    from tests.support.s3_server import create_bucket

    create_bucket("nightly")


def copies(files, folder: Path, start: int, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(start, start + count):
        shutil.copy(files[index % len(files)], folder / f"night{index:03d}.wav")


def label(folder: Path, output: Path, model: Path, cache: Path) -> None:
    from jobs.pseudo_label import main

    assert main(["--audio", str(folder / "*.wav"), "--output", str(output), "--model", str(model),
                 "--cache-dir", str(cache), "--device", "cpu", "--min-confidence", "0"]) == 0


def runs_of(output: Path) -> list[Path]:
    (identity,) = output.glob("labels-*")
    return sorted(p for p in (identity / "runs").iterdir() if p.is_dir())


def manifest_lines(run: Path) -> tuple[list[dict], list[dict], list[dict]]:
    def read(name: str) -> list[dict]:
        text = (run / name).read_text() if not name.endswith(".gz") else gzip.decompress(
            (run / name).read_bytes()).decode()
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return read("train.json"), read("rejected.json"), read("train_cuts.jsonl.gz")


def files_in(runs: list[Path]) -> list[str]:
    found = []
    for run in runs:
        kept, rejected, _ = manifest_lines(run)
        found += [line["audio_filepath"] for line in kept + rejected]
    return found


def test_each_night_labels_only_new_audio_and_every_file_lands_once(ray_cluster, nemo_assets, tmp_path):
    model, cache = nemo_assets["checkpoints"]["rnnt"], tmp_path / "cache"
    audio, output = tmp_path / "incoming", tmp_path / "labels"
    copies(nemo_assets["files"], audio, 0, 40)
    (audio / "broken.wav").write_bytes(b"RIFF not really audio" * 10)  # an unreadable file: a rejected line
    label(audio, output, model, cache)
    (first,) = runs_of(output)
    kept, rejected, cuts = manifest_lines(first)
    assert len(kept) + len(rejected) == 41 and len(cuts) == len(kept)
    broken = [line for line in rejected if line["audio_filepath"].endswith("broken.wav")]
    assert len(broken) == 1 and broken[0]["reason"].startswith("error:") and "broken.wav" in broken[0]["reason"]
    for line in kept:
        assert set(line) >= {"audio_filepath", "duration", "text", "confidence"} and 0 <= line["confidence"] <= 1
    assert all("reason" in line for line in rejected)
    if kept:
        from lhotse import CutSet

        cut_set = CutSet.from_dicts(cuts)
        assert {c.supervisions[0].text for c in cut_set} == {line["text"] for line in kept}
    report = json.loads((first / "report.json").read_text())
    assert report["new_utterances"] == 41 and report["kept"] == len(kept)
    assert (first / "confidence.png").read_bytes()[:4] == b"\x89PNG"

    copies(nemo_assets["files"], audio, 40, 20)  # the next night: 20 new files beside the 40
    label(audio, output, model, cache)
    first_again, second = runs_of(output)
    assert first_again == first
    assert len(files_in([second])) == 20
    second_report = json.loads((second / "report.json").read_text())
    # the 20 new files, and broken.wav tried again (every run does): still unreadable, so counted, not listed
    assert second_report["transcribed_this_run"] == 21 and second_report["still_unreadable"] == 1
    every = files_in([first, second])
    assert len(every) == len(set(every)) == 61

    # a run that died after its manifests, before labelled.txt: the next run takes its files over
    copies(nemo_assets["files"], audio, 60, 5)
    label(audio, output, model, cache)
    third = runs_of(output)[-1]
    (third / "labelled.txt").unlink()
    label(audio, output, model, cache)
    runs = runs_of(output)
    assert third not in runs and len(runs) == 3
    every = files_in(runs)
    assert len(every) == len(set(every)) == 66

    # a file rewritten in place is labelled again, beside its old label
    rewritten = audio / "night000.wav"
    shutil.copy(nemo_assets["files"][1], rewritten)
    os.utime(rewritten, (1_900_000_000, 1_900_000_000))
    label(audio, output, model, cache)
    assert files_in([runs_of(output)[-1]]) == [str(rewritten)]


def test_audio_unreadable_one_night_is_labelled_the_night_it_reads(ray_cluster, nemo_assets, tmp_path):
    """An utterance whose audio could not be read (an outage, a file not there yet) is reported once, in that
    run's rejected.json; every later run tries it again, and the first that reads it labels it."""
    from jobs.pseudo_label import main

    files, late = nemo_assets["files"], tmp_path / "late.wav"
    manifest = tmp_path / "m.json"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(path), "duration": 1.0, "text": "words"}) + "\n"
                                for path in (files[0], late, files[1])))
    output = tmp_path / "labels"

    def night() -> Path:
        assert main(["--manifest", str(manifest), "--output", str(output), "--model",
                     str(nemo_assets["checkpoints"]["rnnt"]), "--cache-dir", str(tmp_path / "cache"),
                     "--device", "cpu", "--min-confidence", "0"]) == 0
        return runs_of(output)[-1]

    first = night()
    kept, rejected, _ = manifest_lines(first)
    (error,) = [line for line in rejected if line["audio_filepath"] == str(late)]
    assert error["reason"].startswith("error:") and len(kept) + len(rejected) == 3
    second = night()  # still missing: tried again, not listed again
    assert files_in([second]) == []
    assert json.loads((second / "report.json").read_text())["still_unreadable"] == 1
    shutil.copy(files[2], late)
    third = night()
    kept, rejected, _ = manifest_lines(third)
    assert [line["audio_filepath"] for line in kept + rejected] == [str(late)]
    assert not any(line["reason"].startswith("error:") for line in rejected)
    trained = [line["audio_filepath"] for run in runs_of(output) for line in manifest_lines(run)[0]]
    assert len(trained) == len(set(trained))


def test_on_s3_a_second_night_labels_only_the_new_files(ray_cluster, nightly_bucket, nemo_assets, tmp_path):
    import s3fs

    from jobs.pseudo_label import main

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    model = nemo_assets["checkpoints"]["rnnt"]

    def night(start: int, count: int) -> None:
        for index in range(start, start + count):
            fs.put(str(nemo_assets["files"][index % len(nemo_assets["files"])]),
                   f"nightly/incoming/n{index:03d}.wav")
        assert main(["--audio", "s3://nightly/incoming/*.wav", "--output", "s3://nightly/labels",
                     "--model", str(model), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu",
                     "--min-confidence", "0"]) == 0

    def labelled() -> list[list[str]]:
        fs.invalidate_cache()
        runs = sorted(fs.glob("nightly/labels/labels-*/runs/*/labelled.txt"))
        found = []
        for path in runs:
            folder = path.rsplit("/", 1)[0]
            lines = [json.loads(line) for name in ("train.json", "rejected.json")
                     for line in fs.cat(f"{folder}/{name}").decode().splitlines() if line.strip()]
            found.append([line["audio_filepath"] for line in lines])
        return found

    night(0, 10)
    night(10, 5)
    first, second = labelled()
    assert len(first) == 10 and sorted(second) == [f"s3://nightly/incoming/n{i:03d}.wav" for i in range(10, 15)]
    assert len(set(first + second)) == 15


def test_the_filters_say_why():
    filters = LabelFilters(min_confidence=0.5)
    row = {"status": "ok", "error": "", "text": "turn on the light", "audio_duration": 1.5, "duration": 1.5,
           "confidence": 0.8}
    assert judge(row, filters) is None
    assert judge({**row, "confidence": 0.2}, filters) == "confidence 0.200 < 0.5"
    assert judge({**row, "text": " "}, filters) == "empty transcript"
    assert judge({**row, "status": "error", "error": "x.wav: file not found"}, filters) == (
        "error: x.wav: file not found")
    assert judge({**row, "audio_duration": 0.1}, filters).startswith("duration 0.10 s outside")
    assert "characters/s" in judge({**row, "text": "a" * 100}, filters)
    looping = "turn on the light turn on the light turn on the light turn on the light"
    assert judge({**row, "text": looping, "audio_duration": 4.0}, filters) == (
        "repetition: 'turn on the light' 4 times in a row")
    assert longest_repeat("a b a b c".split()) == (2, "a b")
    assert judge({**row, "confidence": None}, filters).startswith("no confidence")
    # a hybrid model's heads: agreement below the threshold is a reason, naming the other head's text; rows without
    # the column (one head, or the filter off) are not judged on it
    assert judge({**row, "head_agreement": 0.25, "second_head_text": "turn of delight"}, filters) == (
        "heads disagree: agreement 0.25 < 0.5 (the other head: 'turn of delight')")
    assert judge({**row, "head_agreement": 0.5}, filters) is None
    assert judge({**row, "head_agreement": 0.0}, LabelFilters(min_confidence=0.5, min_head_agreement=0.0)) is None
    with pytest.raises(ValueError, match="min_head_agreement"):
        LabelFilters(min_head_agreement=1.5)
