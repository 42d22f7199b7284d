"""`jobs/transcribe.py` with per-utterance phrase lists (a manifest's `phrases`), end to end: the real command on a
small manifest of the bundled domain samples. The contact names come out for the rows that list them and not for
the same audio without a list; bad `phrases` values (not a list, a bad weight, characters the tokenizer cannot
write) are error rows naming the manifest, the line and the cause, and every other row is written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jobs.test_transcribe_checks import BUNDLED_MODEL, REPOSITORY

DOMAIN = REPOSITORY / "samples" / "domain"
ROWS = [  # (audio, id, phrases)
    ("dev107", None, ["luis phillips", "anna boyle"]),  # "call luis phillips": unboosted, "call luice filips"
    ("dev107", "dev107-plain", None),
    ("dev133", None, [["heather lucero", 2.0]]),  # "request ... from heather lucero for dinner"
    ("dev100", None, ["rachel perkins\t1.5"]),  # "pay rachel perkins ...": unboosted, "pay ratial pockin's ..."
    ("dev102", None, None),
    ("dev104", "dev104-not-a-list", "read heaven"),
    ("dev105", "dev105-bad-weight", [["card", -1]]),
    ("dev106", "dev106-cannot-write", ["зоя"]),
]
ERRORS = {  # id -> what the error says after "MANIFEST, line N: "
    "dev104-not-a-list": "'phrases' must be a list of phrases (strings, or [phrase, weight] pairs), got 'read heaven'",
    "dev105-bad-weight": "'phrases' item 1: the weight must be a number > 0, got -1",
    "dev106-cannot-write": "'phrases': 'зоя' holds characters the model's tokenizer cannot encode",
}


@pytest.mark.ray
@pytest.mark.nemo
def test_the_job_boosts_each_rows_own_phrases(tmp_path):
    from pipeline import schema
    from pipeline.io import sink

    lines = {Path(r["audio_filepath"]).stem: r for r in map(json.loads, (DOMAIN / "dev.json").read_text().splitlines())}
    manifest = tmp_path / "calls.json"
    with open(manifest, "w") as handle:
        for stem, given_id, phrases in ROWS:
            entry = dict(lines[stem], audio_filepath=str(DOMAIN / lines[stem]["audio_filepath"]))
            entry.update({"id": given_id} if given_id else {})
            entry.update({"phrases": phrases} if phrases else {})
            handle.write(json.dumps(entry) + "\n")
    output = tmp_path / "out"
    run = subprocess.run([sys.executable, str(REPOSITORY / "jobs" / "transcribe.py"), "--manifest", str(manifest),
                          "--output", str(output), "--model", str(BUNDLED_MODEL), "--decoding", "alsd",
                          "--cache-dir", str(tmp_path / "cache"), "--torch-threads", "1"],
                         capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = {r[schema.SOURCE_ID] or Path(r[schema.AUDIO_FILEPATH]).stem: r
            for r in sink.read_output(str(output)).to_pylist()}
    assert set(rows) == {given_id or stem for stem, given_id, _ in ROWS}  # every line, exactly once
    for name, cause in ERRORS.items():
        row = rows[name]
        assert row[schema.STATUS] == schema.STATUS_ERROR and row[schema.TEXT] is None
        assert row[schema.ERROR].startswith(f"{manifest}, line {row[schema.LINE]}: {cause}"), row[schema.ERROR]
    ok = {name: row for name, row in rows.items() if name not in ERRORS}
    assert all(row[schema.STATUS] == schema.STATUS_OK for row in ok.values())
    assert rows["dev107"][schema.TEXT] == "call luis phillips"
    assert "luis phillips" not in rows["dev107-plain"][schema.TEXT]
    assert "heather lucero" in rows["dev133"][schema.TEXT]
    assert rows["dev100"][schema.TEXT].startswith("pay rachel perkins")
    assert rows["dev107"][schema.DECODING] == "alsd beam_size=4 row_phrases=2 boost_weight=0.5"
    assert rows["dev107-plain"][schema.DECODING] == rows["dev102"][schema.DECODING] == "alsd beam_size=4"
    # the output keeps each row's list as the manifest wrote it
    assert json.loads(rows["dev133"][schema.EXTRA])["phrases"] == [["heather lucero", 2.0]]
