"""Manifest reading: rows in = rows out for every kind of bad input, ids made from content, paths, globs, sniffing."""

from __future__ import annotations

import bz2
import gzip
import json
import os
import re
import struct
import zlib

import fsspec
import pyarrow as pa
import pytest

from pipeline import schema
from pipeline.io.manifest import (
    expand_manifest_uris,
    parse_line,
    read_manifest,
    resolve_audio_path,
    sniff_manifest,
    utterance_identity,
)


def nemo(audio="a.wav", duration=1.0, **keys) -> bytes:
    return json.dumps({"audio_filepath": audio, "duration": duration, **keys}).encode()


def cut(cut_id, start=0.0, channel=None, sources=None, **keys) -> dict:
    entry = {"id": cut_id, "start": start, "duration": 2.0, "supervisions": [{"id": "s", "text": "words"}],
             "recording": {"id": "r", "sources": sources or [{"type": "file", "channels": [0], "source": "r.wav"}]},
             **keys}
    if channel is not None:
        entry["channel"] = channel
    return entry


def write(path, data: bytes | list[bytes]) -> str:
    path.write_bytes(data if isinstance(data, bytes) else b"".join(line + b"\n" for line in data))
    return str(path)


def read(uri: str) -> list[dict]:
    """read_manifest, checking what every row must be: all the columns, a message naming the manifest and line
    on each error row and on no other, and rows that Arrow takes as the input schema."""
    rows = list(read_manifest(uri))
    for row in rows:
        assert tuple(row) == schema.INPUT_COLUMNS
        if row[schema.STATUS] == schema.STATUS_ERROR:
            assert row[schema.ERROR].startswith(f"{uri}, line {row[schema.LINE]}: ")
        else:
            assert row[schema.STATUS] == schema.STATUS_OK and row[schema.ERROR] == ""
            assert row[schema.AUDIO_FILEPATH] and row[schema.DURATION] >= 0 and row[schema.OFFSET] >= 0
        assert len(row[schema.UTTERANCE_ID]) == 32
    pa.Table.from_pylist(rows, schema=schema.INPUT_SCHEMA)
    return rows


def ids(rows) -> list[str]:
    return [row[schema.UTTERANCE_ID] for row in rows]


def statuses(rows) -> list[str]:
    return [row[schema.STATUS] for row in rows]


# ------------------------------------------------------------------------------------------------- rows and keys

def test_nemo_rows_resolve_relative_audio_and_keep_extra_keys(tmp_path):
    uri = write(tmp_path / "m.json", [
        nemo("a/1.wav", 2.5, text="hello", speaker=7, id="utt-1"),
        b"",
        b"  \t ",
        nemo("/abs/x/../2.flac", 1, offset=0.5, utt_id=12),
        nemo("s3://bucket/3.wav", 3.0, id={"not": "an id"}, utterance_id="u3"),
    ])
    rows = read(uri)
    assert [r[schema.LINE] for r in rows] == [1, 4, 5]  # blank lines are skipped but counted
    assert statuses(rows) == ["ok"] * 3
    assert [r[schema.AUDIO_FILEPATH] for r in rows] == [f"{tmp_path}/a/1.wav", "/abs/2.flac", "s3://bucket/3.wav"]
    assert [r[schema.SOURCE_ID] for r in rows] == ["utt-1", "12", "u3"]
    assert [json.loads(r[schema.EXTRA]) for r in rows] == [{"speaker": 7}, {}, {"id": {"not": "an id"}}]
    assert rows[0][schema.REFERENCE_TEXT] == "hello" and rows[0][schema.CHANNEL] is None
    assert (rows[1][schema.OFFSET], rows[1][schema.DURATION]) == (0.5, 1.0)
    assert rows[0][schema.UTTERANCE_ID] == utterance_identity(f"{tmp_path}/a/1.wav", 0.0, 2.5, None, "utt-1")
    assert ids(read(uri)) == ids(rows)  # stable across reruns


def test_null_offset_and_text_mean_absent(tmp_path):
    (row,) = read(write(tmp_path / "m.json", [nemo(offset=None, text=None)]))
    assert row[schema.STATUS] == "ok" and (row[schema.OFFSET], row[schema.REFERENCE_TEXT]) == (0.0, "")


@pytest.mark.parametrize("line, message", [
    (b'{"audio_filepath": "x.wav", "dur', "malformed JSON (the line ends early, truncated? Unterminated string "
                                          "starting at column 29)"),
    (b'{"audio_filepath": "x.wav", "duration": 1', "the line ends early"),
    (b'{"audio_filepath": "x.wav" "duration": 1}', "malformed JSON (Expecting ',' delimiter at column 28)"),
    (b'{"audio_filepath": "x.wav", "duration": 1} {}', "malformed JSON (Extra data at column 44)"),
    (b"[" * 100_000, "JSON nested 100000 levels deep, deeper than the 100 levels loopscribe reads"),
    (b'{"audio_filepath": "x.wav", "duration": 1' + b"0" * 5000 + b"}", "malformed JSON (ValueError: Exceeds"),
    (b'{"duration": 1.0}', "missing key 'audio_filepath'"),
    (b'{"audio_filepath": null, "duration": 1.0}', "'audio_filepath' is null"),
    (b'{"audio_filepath": "x.wav"}', "missing key 'duration'"),
    (b'{"audio_filepath": "x.wav", "duration": null}', "'duration' is null"),
    (b'{"audio_filepath": "x.wav", "duration": -2}', "'duration' must not be negative, got -2"),
    (b'{"audio_filepath": "x.wav", "duration": "long"}', "'duration' must be a number of seconds, got 'long'"),
    (b'{"audio_filepath": "x.wav", "duration": true}', "'duration' must be a number of seconds, got True"),
    (b'{"audio_filepath": "x.wav", "duration": NaN}', "'duration' must be a finite number of seconds, got nan"),
    (b'{"audio_filepath": "x.wav", "duration": 1e999}', "'duration' must be a finite number of seconds, got inf"),
    (b'{"audio_filepath": "x.wav", "duration": 1' + b"0" * 400 + b"}", "'duration' must be a finite number"),
    (b'{"audio_filepath": "x.wav", "duration": 1, "offset": -1}', "'offset' must not be negative"),
    (b'{"audio_filepath": 5, "duration": 1}', "'audio_filepath' must be a non-empty string"),
    (b'{"audio_filepath": "", "duration": 1}', "'audio_filepath' must be a non-empty string"),
    (b'{"audio_filepath": "\\ud800.wav", "duration": 1}', "'audio_filepath' must be a non-empty string of Unicode"),
    (b"[1, 2]", "expected a JSON object, got list"),
    (b'"just a string"', "expected a JSON object, got str"),
    (b'{"audio_filepath": "a\x00.wav", "duration": 1.0}', "NUL byte at column 22"),
    (b'{"audio_filepath": "caf\xe9.wav", "duration": 1.0}', "not UTF-8 (byte 0xe9 at column 24)"),
    (b'{"audio_filepath": "x.wav", "duration": 1.0}\xff', "not UTF-8 (byte 0xff at column 45)"),
    (json.dumps(cut("c1", sources=[{"type": "memory"}])).encode(), "cut 'c1': no file or url audio source (found "
                                                                   "'memory')"),
    (json.dumps({**cut("c1"), "recording": None}).encode(), "cut 'c1': missing 'recording'"),
    (json.dumps({**cut("c1"), "id": 5}).encode(), "a Lhotse cut needs a string 'id', got 5"),
    (json.dumps({**cut("c1"), "duration": None}).encode(), "'duration' is null"),
    (json.dumps(cut("c1", sources=[{"type": "file", "channels": [0]}])).encode(),
     "cut 'c1': the audio source's 'source' is null"),
])
def test_bad_lines_become_error_rows_naming_file_and_line(tmp_path, line, message):
    uri = write(tmp_path / "bad.json", [nemo("ok.wav"), line, nemo("ok2.wav")])
    rows = read(uri)
    assert statuses(rows) == ["ok", "error", "ok"]  # lines in = rows out, the others unaffected
    assert rows[1][schema.ERROR].startswith(f"{uri}, line 2: ")
    assert message in rows[1][schema.ERROR], rows[1][schema.ERROR]
    assert "\n" not in rows[1][schema.ERROR] and len(rows[1][schema.ERROR]) < len(uri) + 300


def test_an_error_row_keeps_the_lines_own_id(tmp_path):
    rows = read(write(tmp_path / "m.json", [
        json.dumps({"id": "u1", "duration": 1}).encode(), json.dumps({**cut("c9"), "duration": -1}).encode()]))
    assert statuses(rows) == ["error", "error"] and [r[schema.SOURCE_ID] for r in rows] == ["u1", "c9"]


def test_unpaired_surrogates_in_extra_keys_are_kept_escaped(tmp_path):
    (row,) = read(write(tmp_path / "m.json", [b'{"audio_filepath": "a.wav", "duration": 1, "note": "\\udc80"}']))
    assert row[schema.STATUS] == "ok" and json.loads(row[schema.EXTRA]) == {"note": "\udc80"}


@pytest.mark.parametrize("text, kept", [
    (3, "3"), (2.5, "2.5"), (True, "true"), (["a", "b"], '["a", "b"]'), ({"words": "hi"}, '{"words": "hi"}'),
    ("plain", "plain"), ("", ""), (None, ""),
])
def test_a_reference_text_of_any_json_type_is_kept_as_text_and_the_row_transcribed(tmp_path, text, kept):
    """A `text` that is not a string used to make the row an error row: its transcript was lost for a reference."""
    rows = read(write(tmp_path / "m.json", [nemo("a.wav", text=text),
                                            json.dumps({**cut("c1"), "supervisions": [{"text": text}]}).encode()]))
    assert statuses(rows) == ["ok", "ok"]
    assert [row[schema.REFERENCE_TEXT] for row in rows] == [kept, kept]


def test_a_reference_text_with_unpaired_surrogates_keeps_them_escaped(tmp_path):
    (row,) = read(write(tmp_path / "m.json", [b'{"audio_filepath": "a.wav", "duration": 1, "text": "x\\ud800y"}']))
    assert row[schema.STATUS] == "ok" and row[schema.REFERENCE_TEXT] == "x\\ud800y"


def test_non_finite_numbers_in_extra_keys_are_written_as_valid_json(tmp_path):
    """Python's JSON reader takes NaN and Infinity; written back as numbers they made `extra` invalid JSON."""
    line = (b'{"audio_filepath": "a.wav", "duration": 1, "snr": NaN, "gain": [Infinity, -Infinity, 1.5], '
            b'"meta": {"x": NaN}, "text": [NaN]}')
    (row,) = read(write(tmp_path / "m.json", [line]))
    assert row[schema.STATUS] == "ok"
    strict = json.loads(row[schema.EXTRA], parse_constant=lambda name: pytest.fail(f"{name} in extra"))
    assert strict == {"snr": "NaN", "gain": ["Infinity", "-Infinity", 1.5], "meta": {"x": "NaN"}}
    assert row[schema.REFERENCE_TEXT] == '["NaN"]'


@pytest.mark.parametrize("depth", [100, 101, 990, 5000])
def test_json_nested_deeper_than_the_bound_is_named_as_such(tmp_path, depth):
    """Valid JSON nested deeply used to be called "malformed" (where Python's reader gave up, near 1,000 levels)
    or read (below): the bound is now loopscribe's own, and the error says what it is."""
    nested = "[" * (depth - 1) + "]" * (depth - 1)  # the line's object is one level more
    rows = read(write(tmp_path / "m.json", [b'{"audio_filepath": "a.wav", "duration": 1, "deep": %s}' % nested.encode(),
                                            ('{"text": "' + "[" * 500 + '", ' + nemo("b.wav").decode()[1:]).encode()]))
    assert statuses(rows) == ["ok" if depth <= 100 else "error", "ok"]  # brackets in a string do not count
    if depth > 100:
        assert rows[0][schema.ERROR].endswith(
            f"line 1: JSON nested {depth} levels deep, deeper than the 100 levels loopscribe reads")
        assert "malformed" not in rows[0][schema.ERROR]


def test_parse_line_of_text_gives_the_same_row_as_reading_it(tmp_path):
    uri = write(tmp_path / "m.json", [nemo("a.wav", 1.5, text="hi"), b"{bad"])
    assert read(uri) == [parse_line(nemo("a.wav", 1.5, text="hi").decode(), uri, 1), parse_line("{bad", uri, 2)]


# ------------------------------------------------------------------------------------------------------ identity

def test_ids_are_made_from_content_not_line_numbers(tmp_path):
    lines = [nemo(f"/audio/{i}.wav", 1.0 + i, text=f"t{i}") for i in range(5)]
    first = read(write(tmp_path / "m.json", lines))
    by_audio = {r[schema.AUDIO_FILEPATH]: r[schema.UTTERANCE_ID] for r in first}
    # regenerated: a line inserted at the top, the rest re-sorted; and the same lines in another manifest
    for path, edited in ((tmp_path / "m.json", [nemo("/audio/new.wav")] + lines[::-1]),
                         (tmp_path / "elsewhere" / "copy.json", lines[2:])):
        path.parent.mkdir(exist_ok=True)
        again = read(write(path, edited))
        assert all(by_audio[r[schema.AUDIO_FILEPATH]] == r[schema.UTTERANCE_ID]
                   for r in again if r[schema.AUDIO_FILEPATH] in by_audio)
    assert len(set(by_audio.values())) == 5


def test_identical_lines_are_one_utterance_and_different_content_is_not(tmp_path):
    rows = read(write(tmp_path / "m.json", [
        nemo("a.wav", 1.5), nemo("a.wav", 1.5), nemo("a.wav", 1.5000000001), json.dumps(
            {"duration": 1.5, "audio_filepath": "./x/../a.wav"}).encode(),  # same content, written otherwise
        nemo("a.wav", 1.5, offset=0.5), nemo("a.wav", 1.6), nemo("b.wav", 1.5), nemo("a.wav", 1.5, id="given"),
        nemo("a.wav", 1.5, text="another reference"),  # the text is not what the utterance is
    ]))
    assert len(set(ids(rows[:4] + rows[8:]))) == 1
    assert len(set(ids(rows[3:8]))) == 5


def test_utterance_identity_rounds_to_microseconds_and_hashes_every_value():
    base = utterance_identity("s3://b/a.wav", 1.5, 2.0, None, None)
    assert base == utterance_identity("s3://b/a.wav", 1.50000004, 2, None, None) == utterance_identity(
        "s3://b/a.wav", 1.5, 2.0000001 - 0.0000001, None, None)
    assert utterance_identity("x", -0.0, 1.0, None, None) == utterance_identity("x", 0.0, 1.0, None, None)
    others = [utterance_identity("s3://b/b.wav", 1.5, 2.0, None, None),
              utterance_identity("s3://b/a.wav", 1.500001, 2.0, None, None),
              utterance_identity("s3://b/a.wav", 1.5, 2.1, None, None),
              utterance_identity("s3://b/a.wav", 1.5, 2.0, 0, None),
              utterance_identity("s3://b/a.wav", 1.5, 2.0, 1, None),
              utterance_identity("s3://b/a.wav", 1.5, 2.0, None, "id")]
    assert len({base, *others}) == 7 and all(len(i) == 32 and int(i, 16) >= 0 for i in others)


def test_a_bad_line_keeps_its_id_when_lines_are_inserted_above_it(tmp_path):
    bad = [b"{broken", b'{"audio_filepath": "x.wav"}']
    first = read(write(tmp_path / "m.json", bad))
    again = read(write(tmp_path / "m.json", [nemo("new.wav"), b"", *bad, b"{broken"]))
    assert statuses(again) == ["ok", "error", "error", "error"]
    assert ids(again[1:3]) == ids(first) and again[3][schema.UTTERANCE_ID] == first[0][schema.UTTERANCE_ID]
    assert [r[schema.LINE] for r in again] == [1, 3, 4, 5] and len(set(ids(first))) == 2
    # the id is the manifest's too: the same bad line elsewhere is another row
    assert ids(read(write(tmp_path / "other.json", bad))) != ids(first)


# ------------------------------------------------------------------------------------------------------- Lhotse

def test_lhotse_cuts_gzip(tmp_path):
    entry = {
        "id": "cut-1", "start": 1.5, "duration": 2.0, "channel": 0, "type": "MonoCut",
        "supervisions": [{"id": "s1", "text": "good"}, {"id": "s2", "text": "morning"}, {"id": "s3"}],
        "recording": {"id": "r1", "sampling_rate": 16000, "num_samples": 160000, "duration": 10.0,
                      "sources": [{"type": "file", "channels": [0], "source": "audio/r1.wav"}]},
    }
    path = tmp_path / "cuts.jsonl.gz"
    path.write_bytes(gzip.compress(json.dumps(entry).encode() + b"\n"))
    (row,) = read(str(path))
    assert row[schema.SOURCE_ID] == "cut-1"
    assert row[schema.UTTERANCE_ID] == utterance_identity(f"{tmp_path}/audio/r1.wav", 1.5, 2.0, None, "cut-1")
    assert row[schema.AUDIO_FILEPATH] == f"{tmp_path}/audio/r1.wav"
    assert (row[schema.OFFSET], row[schema.DURATION], row[schema.CHANNEL]) == (1.5, 2.0, None)
    assert row[schema.REFERENCE_TEXT] == "good morning"
    assert json.loads(row[schema.EXTRA]) == {"type": "MonoCut"}


def test_cuts_sharing_an_id_are_different_utterances_where_their_content_differs(tmp_path):
    rows = read(write(tmp_path / "cuts.jsonl", [json.dumps(c).encode() for c in (
        cut("a", 0.0), cut("a", 0.5), cut("a", 0.0), cut("b", 0.0))]))
    assert [r[schema.SOURCE_ID] for r in rows] == ["a", "a", "a", "b"]
    assert ids(rows)[0] == ids(rows)[2] and len(set(ids(rows))) == 3


STEREO = {"type": "file", "channels": [0, 1], "source": "stereo.wav"}
MONO_2 = {"type": "url", "channels": [2], "source": "https://h/ch2.flac?sig=a/../b"}


@pytest.mark.parametrize("channel, sources, audio, index", [
    (None, [STEREO, MONO_2], "stereo.wav", None),  # no channel: the first file or url source, all channels
    (0, [STEREO, MONO_2], "stereo.wav", 0),
    (1, [STEREO, MONO_2], "stereo.wav", 1),
    ([1], [STEREO, MONO_2], "stereo.wav", 1),
    (2, [STEREO, MONO_2], "https://h/ch2.flac?sig=a/../b", None),  # a source of one channel: all of it
    ([1, 0], [STEREO, MONO_2], "stereo.wav", None),  # all of a source's channels: mixed down
    (3, [{"type": "memory", "channels": [3]}, {"type": "file", "channels": [4, 3], "source": "x.wav"}], "x.wav", 1),
])
def test_a_cuts_channel_picks_the_source_holding_it(tmp_path, channel, sources, audio, index):
    (row,) = read(write(tmp_path / "c.jsonl", [json.dumps(cut("c", channel=channel, sources=sources)).encode()]))
    assert row[schema.STATUS] == "ok", row[schema.ERROR]
    assert row[schema.AUDIO_FILEPATH] == (audio if "://" in audio else f"{tmp_path}/{audio}")
    assert row[schema.CHANNEL] == index
    assert row[schema.UTTERANCE_ID] == utterance_identity(row[schema.AUDIO_FILEPATH], 0.0, 2.0, index, "c")


@pytest.mark.parametrize("channel, message", [
    ([0, 2], "channels [0, 2] are not all the channels of one audio source: only one channel, or all of a source's"),
    (5, "channel 5 is in no file or url audio source's 'channels'"),
    ("0", "'channel' must be an integer or a list of integers, got '0'"),
    ([], "'channel' must be an integer or a list of integers, got []"),
    (True, "'channel' must be an integer or a list of integers, got True"),
])
def test_a_cuts_channel_that_cannot_be_decoded_is_an_error_row(tmp_path, channel, message):
    uri = write(tmp_path / "c.jsonl", [json.dumps(cut("c", channel=channel, sources=[STEREO, MONO_2])).encode()])
    (row,) = read(uri)
    assert row[schema.STATUS] == "error" and row[schema.SOURCE_ID] == "c"
    assert row[schema.ERROR].startswith(f"{uri}, line 1: cut 'c': {message}"), row[schema.ERROR]


def test_channels_of_one_cut_make_distinct_utterances(tmp_path):
    rows = read(write(tmp_path / "c.jsonl", [json.dumps(cut("c", channel=ch, sources=[STEREO])).encode()
                                              for ch in (0, 1, [0, 1])]))
    assert [r[schema.CHANNEL] for r in rows] == [0, 1, None] and len(set(ids(rows))) == 3


# ----------------------------------------------------------------------------------------- encodings and files

def test_a_utf8_bom_is_skipped_at_the_start_of_the_file_and_of_a_line(tmp_path):
    bom = "\ufeff".encode()
    rows = read(write(tmp_path / "m.json", bom + nemo("a.wav") + b"\n" + bom + nemo("b.wav") + b"\r\n" + bom + b"\n"))
    assert statuses(rows) == ["ok", "ok"] and [r[schema.AUDIO_FILEPATH] for r in rows] == [
        f"{tmp_path}/a.wav", f"{tmp_path}/b.wav"]
    assert sniff_manifest(str(tmp_path / "m.json")) is None


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_with_a_bom_is_read_as_utf16(tmp_path, codec):
    text = nemo("caf\u00e9.wav", text="\u65e5\u672c").decode() + "\r\n\n" + nemo("b.wav").decode() + "\n"
    data = text.encode(codec) if codec == "utf-16" else "\ufeff".encode(codec) + text.encode(codec)
    uri = write(tmp_path / "m.json", data)
    rows = read(uri)
    assert statuses(rows) == ["ok", "ok"] and [r[schema.LINE] for r in rows] == [1, 3]
    assert rows[0][schema.AUDIO_FILEPATH] == f"{tmp_path}/caf\u00e9.wav"
    assert rows[0][schema.REFERENCE_TEXT] == "\u65e5\u672c"
    assert sniff_manifest(uri) is None


def test_utf16_that_does_not_decode_costs_its_own_line(tmp_path):
    good = ("\n".join([nemo("a.wav").decode(), '{"audio_filepath": "', nemo("b.wav").decode()])).encode("utf-16-le")
    lone_surrogate = b"\x00\xd8"
    cut_at = len(nemo("a.wav").decode() + "\n" + '{"audio_filepath": "') * 2
    uri = write(tmp_path / "m.json", b"\xff\xfe" + good[:cut_at] + lone_surrogate + good[cut_at:] + b"\n\x00" + b"7")
    rows = read(uri)
    assert statuses(rows) == ["ok", "error", "ok", "error"]  # the last line is a stray odd byte
    assert "not UTF-16 text (an unpaired surrogate or a stray byte at column 21)" in rows[1][schema.ERROR]


def test_a_line_that_is_not_utf8_costs_only_itself(tmp_path):
    uri = write(tmp_path / "latin1.json", [nemo("a.wav"), b'{"audio_filepath": "caf\xe9.wav", "duration": 1}',
                                           b"\xff\xfe not a BOM here", nemo("b.wav")])
    rows = read(uri)
    assert statuses(rows) == ["ok", "error", "error", "ok"]
    assert rows[1][schema.ERROR] == f"{uri}, line 2: not UTF-8 (byte 0xe9 at column 24)"
    assert rows[2][schema.ERROR] == f"{uri}, line 3: not UTF-8 (byte 0xff at column 1)"


def gzip_of_lines(count: int) -> tuple[bytes, list[bytes]]:
    lines = [nemo(f"/a/{i}.wav", 1.0, offset=0.01 * i, text="x" * (i % 7)) for i in range(count)]
    return gzip.compress(b"".join(line + b"\n" for line in lines), mtime=0), lines


def test_a_truncated_gzip_gives_every_complete_line_then_one_error_row(tmp_path):
    whole, _ = gzip_of_lines(3000)
    uri = write(tmp_path / "m.jsonl.gz", whole[: len(whole) * 2 // 3])
    rows = read(uri)
    ok = [r for r in rows if r[schema.STATUS] == "ok"]
    # what zlib can give of the cut data, up to its last newline, is what must come out
    readable = zlib.decompressobj(wbits=31).decompress(whole[: len(whole) * 2 // 3])
    expected = readable.count(b"\n")
    assert 100 < expected < 3000 and len(ok) == expected and len(rows) == expected + 1
    assert [r[schema.LINE] for r in rows] == list(range(1, expected + 2))
    assert rows[-1][schema.ERROR] == (f"{uri}, line {expected + 1}: compressed data broken after line {expected} "
                                      "(EOFError: compressed file ended before the end-of-stream marker was reached)")
    assert sniff_manifest(uri) is None  # it has lines to transcribe


def test_a_gzip_corrupt_in_the_middle_gives_the_lines_before_the_break(tmp_path):
    whole, lines = gzip_of_lines(20000)
    broken = bytearray(whole)
    middle = len(whole) // 2
    broken[middle: middle + 200] = bytes(200)  # zeros where compressed data was
    rows = read(write(tmp_path / "m.jsonl.gz", bytes(broken)))
    assert rows[-1][schema.STATUS] == "error"
    assert f"compressed data broken after line {len(rows) - 1} (zlib.error: " in rows[-1][schema.ERROR]
    # deflate has no check before the member's end, so lines just before the break may be garbled; those well
    # before it come out, decompressed in small steps so as not to be lost with the break
    intact = next(i for i, (row, line) in enumerate(zip(rows, lines)) if row[schema.AUDIO_FILEPATH] != json.loads(
        line)["audio_filepath"])
    assert intact > 9000 and [r[schema.LINE] for r in rows] == list(range(1, len(rows) + 1))


def test_concatenated_gzip_members_are_one_manifest(tmp_path):
    rows = read(write(tmp_path / "m.json.gz", gzip.compress(nemo("a.wav") + b"\n") + b"\0\0" + gzip.compress(
        nemo("b.wav"))))
    assert statuses(rows) == ["ok", "ok"]


def test_other_compressions_are_inferred_from_the_suffix_and_their_breaks_reported(tmp_path):
    data = b"".join(nemo(f"{i}.wav") + b"\n" for i in range(40_000))  # 1.7 MB: bz2 blocks are 900 kB
    assert statuses(read(write(tmp_path / "m.json.bz2", bz2.compress(data)))) == ["ok"] * 40_000
    rows = read(write(tmp_path / "cut.json.bz2", bz2.compress(data)[:-100]))
    assert rows[-1][schema.STATUS] == "error" and "compressed data broken after line" in rows[-1][schema.ERROR]
    assert statuses(rows[:-1]) == ["ok"] * (len(rows) - 1) and len(rows) > 10_000


@pytest.mark.parametrize("name, data, message", [
    ("text.jsonl.gz", nemo() + b"\n" + nemo() + b"\n",
     """not a gzip file (BadGzipFile: not gzip data (it starts with b'{"audio_'))"""),
    ("short.jsonl.gz", gzip.compress(nemo())[:6], "not a gzip file, or broken at its start (EOFError: "),
    ("gzip.json", gzip.compress(nemo()), "not a text manifest: gzip data in a file whose name does not end in .gz"),
    ("audio.json", b"fLaC\x00\x00\x00\x22\x10\x00\x10\x00" + bytes(range(256)) * 40,
     "not a text manifest: binary data (byte 0x00 at column 5)"),
    ("audio.wav.json", b"RIFF" + struct.pack("<I", 36 + 64000) + b"WAVEfmt " + bytes(64000) + b"\n" * 300,
     "not a text manifest: binary data (byte 0x"),
    ("mp3.json", b"\xff\xfb\x90\x64" + b"\x55" * 20000, "not a text manifest: not UTF-8 or UTF-16 text (byte 0xff at "
                                                        "column 1)"),
    ("blank_then_binary.json", b"\n  \n" + b"\x01\x02\n" * 500, "not a text manifest: binary data (byte 0x01 at "),
])
def test_a_file_that_is_no_text_manifest_is_one_error_row(tmp_path, name, data, message):
    uri = write(tmp_path / name, data)
    (row,) = read(uri)
    assert row[schema.STATUS] == "error" and message in row[schema.ERROR], row[schema.ERROR]
    assert row[schema.ERROR].startswith(f"{uri}, line ")
    problem = sniff_manifest(uri)
    assert problem is not None and problem.startswith(f"{uri}: ") and message in problem


def test_nul_bytes_and_garbage_after_a_json_first_line_are_errors_of_their_lines(tmp_path):
    uri = write(tmp_path / "m.json", [nemo("a.wav"), b"\x00\x01garbage\xff", b'{"audio_filepath": "b\x00"}', nemo()])
    rows = read(uri)
    assert statuses(rows) == ["ok", "error", "error", "ok"]
    assert "not UTF-8 (byte 0xff at column 10)" in rows[1][schema.ERROR]
    assert "NUL byte at column 22" in rows[2][schema.ERROR]


def test_a_json_first_line_holding_a_nul_is_not_a_binary_file(tmp_path):
    rows = read(write(tmp_path / "m.json", [b'{"audio_filepath": "a\x00.wav", "duration": 1}', nemo()]))
    assert statuses(rows) == ["error", "ok"] and "NUL byte" in rows[0][schema.ERROR]


def test_a_binary_file_with_no_newline_is_judged_without_reading_it_all(tmp_path):
    path = tmp_path / "big.json"
    with open(path, "wb") as handle:
        handle.write(b"\x00" * (64 << 20))
    (row,) = read(str(path))
    assert "binary data (byte 0x00 at column 1)" in row[schema.ERROR]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_manifest_is_one_error_row(tmp_path):
    uri = write(tmp_path / "secret.json", [nemo()])
    os.chmod(uri, 0)
    (row,) = read(uri)
    assert "cannot open the manifest (PermissionError: " in row[schema.ERROR]
    assert "cannot open the manifest (PermissionError" in sniff_manifest(uri)


@pytest.mark.parametrize("kind, message", [
    ("missing", "cannot open the manifest (FileNotFoundError: "),
    ("directory", "cannot open the manifest (IsADirectoryError: "),
    ("fifo", "cannot open the manifest (OSError: "),  # opening a FIFO would wait forever for a writer
])
def test_a_manifest_that_cannot_be_opened_is_one_error_row(tmp_path, kind, message):
    path = tmp_path / "m.json"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    (row,) = read(str(path))
    assert row[schema.LINE] == 1 and row[schema.ERROR].startswith(f"{path}, line 1: {message}")
    assert ids(read(str(path))) == ids([row])  # the same file gives the same error row
    assert sniff_manifest(str(path)).startswith(f"{path}: {message}")


def test_a_remote_manifest_reads_like_a_local_one():
    filesystem = fsspec.filesystem("memory")
    lines = [nemo("../audio/a.wav"), b"{broken", nemo("s3://other/b.wav", offset=1)]
    filesystem.pipe("/bucket/manifests/m.json.gz", gzip.compress(b"\n".join(lines)))
    rows = read("memory://bucket/manifests/m.json.gz")
    assert statuses(rows) == ["ok", "error", "ok"]
    assert rows[0][schema.AUDIO_FILEPATH] == "memory://bucket/audio/a.wav"
    assert sniff_manifest("memory://bucket/manifests/m.json.gz") is None
    (missing,) = read("memory://bucket/nope.json")
    assert "cannot open the manifest (FileNotFoundError" in missing[schema.ERROR]
    filesystem.rm("/bucket", recursive=True)


# -------------------------------------------------------------------------------------------------------- paths

@pytest.mark.parametrize("audio, manifest, resolved", [
    ("../audio/x.flac", "s3://bucket/manifests/m.json", "s3://bucket/audio/x.flac"),
    ("./x.flac", "s3://bucket/manifests/m.json", "s3://bucket/manifests/x.flac"),
    ("../../../../x.flac", "s3://bucket/a/m.json", "s3://bucket/x.flac"),  # never above the bucket
    ("s3://bucket/a/./b/../../c.wav", "/local/m.json", "s3://bucket/c.wav"),
    ("x.flac", "s3://bucket/m.json?versionId=3", "s3://bucket/x.flac"),
    ("x.flac", "s3://bucket", "s3://bucket/x.flac"),
    ("a//b.wav", "gs://bucket/m.json", "gs://bucket/a//b.wav"),  # an empty segment is part of an object's key
    ("https://h/a/../b.wav?sig=x/../y&t=.#f/..", "s3://b/m.json", "https://h/b.wav?sig=x/../y&t=.#f/.."),
    ("../b.wav", "https://h/x/y/m.json?token=abc", "https://h/x/b.wav"),
    ("s3://KEY:SECRET@bucket/a/../b.wav", "/m.json", "s3://KEY:SECRET@bucket/b.wav"),
    ("a.wav", "samples/m.json", "samples/a.wav"),
    ("a.wav", "m.json", "a.wav"),
    ("../a.wav", "samples/m.json", "a.wav"),
    ("../a.wav", "m.json", "../a.wav"),
    ("x::y.wav", "/data/m.json", "/data/x::y.wav"),  # a local name, not an fsspec chain
    ("sub/../x#1 [a]?.wav", "/data/m.json", "/data/x#1 [a]?.wav"),
    ("/abs/./x/../a.wav", "s3://bucket/m.json", "/abs/a.wav"),
    ("a.wav", "file:///data/sub/m.json", "/data/sub/a.wav"),
    ("file:///data/../x/a.wav", "/m.json", "/x/a.wav"),
    ("simplecache::s3://b/a.wav", "/m.json", "simplecache::s3://b/a.wav"),
])
def test_resolve_audio_path_resolves_dots_like_a_filesystem(audio, manifest, resolved):
    assert resolve_audio_path(audio, manifest) == resolved


def test_globs_expand_in_order_and_missing_is_an_error(tmp_path):
    for name in ("b.json", "a.json", "c.txt"):
        write(tmp_path / name, [nemo()])
    (tmp_path / "d.json").mkdir()
    assert expand_manifest_uris([str(tmp_path / "*.json")]) == [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert expand_manifest_uris([str(tmp_path / "b.json"), str(tmp_path / "*.json"), f"file://{tmp_path}/a.json"]) == [
        str(tmp_path / "b.json"), str(tmp_path / "a.json")]  # order kept, each once, file:// is the local path
    for missing in ("nope*.json", "nope.json", "d.json"):
        with pytest.raises(FileNotFoundError, match=re.escape(f"no manifest matches '{tmp_path}/{missing}'")):
            expand_manifest_uris([str(tmp_path / "a.json"), str(tmp_path / missing)])


def test_relative_patterns_become_absolute_paths(tmp_path, monkeypatch):
    write(tmp_path / "m.json", [nemo()])
    monkeypatch.chdir(tmp_path)
    assert expand_manifest_uris(["m.json", "./*.json"]) == [str(tmp_path / "m.json")]


@pytest.mark.parametrize("name", ["man[1].json", "x::y.json", "a*b?.json", "with space #1 caf\u00e9.json"])
def test_an_existing_file_is_taken_literally_whatever_its_name_holds(tmp_path, name):
    write(tmp_path / name, [nemo()])
    write(tmp_path / "man1.json", [nemo()])
    write(tmp_path / "axxbz.json", [nemo()])
    assert expand_manifest_uris([str(tmp_path / name)]) == [str(tmp_path / name)]
    assert expand_manifest_uris([str(tmp_path / name)], glob=False) == [str(tmp_path / name)]
    assert statuses(read(expand_manifest_uris([str(tmp_path / name)])[0])) == ["ok"]


def test_glob_true_always_globs_and_false_never_does(tmp_path):
    for name in ("man[1].json", "man1.json"):
        write(tmp_path / name, [nemo()])
    assert expand_manifest_uris([str(tmp_path / "man[1].json")], glob=True) == [str(tmp_path / "man1.json")]
    assert expand_manifest_uris([str(tmp_path / "man[12].json")]) == [str(tmp_path / "man1.json")]  # no such file
    with pytest.raises(FileNotFoundError, match="no manifest matches"):
        expand_manifest_uris([str(tmp_path / "man[12].json")], glob=False)


def test_remote_patterns_glob_through_fsspec():
    filesystem = fsspec.filesystem("memory")
    for name in ("b.json", "a.json", "m[1].json"):
        filesystem.pipe(f"/globs/{name}", nemo())
    try:
        assert expand_manifest_uris(["memory://globs/*.json"]) == [
            "memory:///globs/a.json", "memory:///globs/b.json", "memory:///globs/m[1].json"]
        assert expand_manifest_uris(["memory://globs/m[1].json"]) == ["memory://globs/m[1].json"]
        with pytest.raises(FileNotFoundError, match="no manifest matches 'memory://globs/x"):
            expand_manifest_uris(["memory://globs/x*.json"])
    finally:
        filesystem.rm("/globs", recursive=True)


# ------------------------------------------------------------------------------------------------------ sniffing

@pytest.mark.parametrize("data, problem", [
    ([nemo()], None),
    ([b"{not json", b"neither", nemo()], None),  # malformed lines are error rows, not a problem of the file
    ([b"path,duration", b"a.wav,1.0"], None),  # text, if no manifest: every line will say so
    (b"", "no line to transcribe (empty, or only blank lines)"),
    (b"\n   \n\t\r\n", "no line to transcribe (empty, or only blank lines)"),
    ([b'{"audio_filepath": "caf\xe9.wav"}', b'{"x": "\xff"}'], "not UTF-8 or UTF-16 text (no line of its first MiB"),
    (b"\x00\x00\x00\x18ftypM4A " + bytes(range(256)) * 10, "not a text manifest: binary data (byte 0x00 at column 1)"),
])
def test_sniff_manifest_names_a_manifest_with_nothing_to_read(tmp_path, data, problem):
    uri = write(tmp_path / "m.json", data)
    found = sniff_manifest(uri)
    assert found is None if problem is None else found.startswith(f"{uri}: {problem}")
    if problem is not None and problem.startswith("no line"):
        assert read(uri) == []


def test_sniff_manifest_reads_at_most_a_mib(tmp_path):
    blank_start = write(tmp_path / "blank_start.json", b" \n" * (1 << 20) + nemo() + b"\n")
    assert sniff_manifest(blank_start) is None  # it cannot tell from its first MiB: not a problem
    assert statuses(read(blank_start)) == ["ok"]
    lines = [nemo(f"{i}.wav") for i in range(1 << 16)]
    late_break = gzip.compress(b"".join(line + b"\n" for line in lines))
    late = write(tmp_path / "late.json.gz", late_break[:-20])
    assert sniff_manifest(late) is None and read(late)[-1][schema.STATUS] == "error"
    early = write(tmp_path / "early.json.gz", gzip.compress(b"\n" * 100 + nemo())[:-12])
    assert "compressed data broken after line 100" in sniff_manifest(early)
