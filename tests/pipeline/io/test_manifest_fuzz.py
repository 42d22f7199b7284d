"""Fuzzing the manifest reader with generated manifests: lines of every kind (NeMo and Lhotse dicts with wrong
types, missing keys, huge numbers, unicode; truncated JSON, NUL bytes, bytes that are not UTF-8, random bytes),
plain, UTF-16, gzipped, and gzipped then cut short. `read_manifest` and `sniff_manifest` never raise, and the
rows are what the module docstring says: one per non-blank line, or the documented rows of a broken or binary
file. 1,700 examples in all."""

from __future__ import annotations

import gzip
import json
import math
import zlib

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import schema
from pipeline.io.manifest import read_manifest, sniff_manifest, utterance_identity

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ASCII_SPACE = b" \t\r\n\v\f"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
FILE_PROBLEMS = ("not a text manifest", "cannot open the manifest", "broken at its start", "not a gzip file",
                 "compressed data broken after line")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)
good_seconds = st.floats(min_value=0, max_value=1e4) | st.integers(0, 10**4)
seconds = st.one_of(good_seconds, good_seconds, st.floats(), st.integers(min_value=-(10**400), max_value=10**400),
                    json_values)
good_audio = st.one_of(
    st.sampled_from(["a.wav", "../x/./../a.flac", "s3://b/../c.wav", "x::y.wav", "/abs/a.wav", "file:///a/b.wav",
                     "https://h/a.wav?x=../1#y", "caf\u00e9 [1].wav", ".", "simplecache::s3://b/a.wav"]),
    st.text(min_size=1, max_size=12))
audio = st.one_of(good_audio, good_audio, json_values)
good_ids = st.text(min_size=1, max_size=6) | st.integers()
ids = st.one_of(good_ids, good_ids, json_values)
texts = st.one_of(st.text(max_size=10), st.text(max_size=10), json_values)
good_nemo = st.fixed_dictionaries(
    {"audio_filepath": good_audio, "duration": good_seconds},
    optional={"offset": good_seconds, "text": st.text(max_size=10), "id": good_ids, "speaker": json_values})
wild_nemo = st.fixed_dictionaries(
    {},
    optional={"audio_filepath": audio, "duration": seconds, "offset": seconds, "text": texts, "id": ids,
              "utt_id": ids, "utterance_id": ids, "speaker": json_values})
channel_lists = st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True)
good_sources = st.fixed_dictionaries(
    {"type": st.sampled_from(["file", "url"]), "channels": channel_lists, "source": good_audio})
good_cuts = st.fixed_dictionaries(
    {"id": st.text(min_size=1, max_size=6), "duration": good_seconds,
     "recording": st.fixed_dictionaries({"sources": st.lists(good_sources, min_size=1, max_size=3)})},
    optional={"start": good_seconds, "channel": st.integers(0, 3) | channel_lists,
              "supervisions": st.lists(st.fixed_dictionaries({"text": st.text(max_size=6)}), max_size=3)})
wild_sources = st.fixed_dictionaries(
    {}, optional={"type": st.sampled_from(["file", "url", "memory"]) | json_values,
                  "channels": st.one_of(channel_lists, json_values), "source": audio})
wild_cuts = st.fixed_dictionaries(
    {"recording": st.one_of(st.fixed_dictionaries({"sources": st.lists(wild_sources, max_size=3)}), json_values)},
    optional={"id": ids, "duration": seconds, "start": seconds,
              "channel": st.one_of(st.integers(-1, 4), st.lists(st.integers(0, 4), max_size=3), json_values),
              "supervisions": st.lists(st.fixed_dictionaries({}, optional={"text": texts}), max_size=3) | json_values,
              "type": st.just("MonoCut")})


@st.composite
def json_lines(draw) -> bytes:
    value = draw(st.one_of(good_nemo, good_cuts, wild_nemo, wild_cuts, json_values))
    return json.dumps(value, ensure_ascii=draw(st.booleans())).encode()


@st.composite
def mutated_lines(draw) -> bytes:
    """A JSON line cut short, or with a NUL, a byte that is not UTF-8, an escaped lone surrogate, a BOM, a CR."""
    line = draw(json_lines())
    at = draw(st.integers(0, len(line)))
    how = draw(st.sampled_from(["truncate", "nul", "not utf-8", "surrogate", "bom", "cr"]))
    if how == "truncate":
        return line[:at]
    if how == "bom":
        return "\ufeff".encode() + line
    if how == "cr":
        return line + b"\r"
    inserted = {"nul": b"\x00", "not utf-8": draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe9"])),
                "surrogate": b"\\udc80"}[how]
    return line[:at] + inserted + line[at:]


lines = st.one_of(
    json_lines(), json_lines(), json_lines(), mutated_lines(), mutated_lines(), st.binary(max_size=30),
    st.text(max_size=20).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"", b" ", b"\t", b"\r", "\u3000".encode(), "\ufeff".encode(), b"\x1c"]),
).map(lambda line: line.replace(b"\n", b" "))


@st.composite
def manifests(draw) -> tuple[list[bytes], bytes]:
    """(the lines, the file's bytes): the lines joined by "\\n", with or without a last one."""
    drawn = draw(st.lists(lines, max_size=12))
    return drawn, b"\n".join(drawn) + (b"\n" if drawn and draw(st.booleans()) else b"")


def is_blank(line: bytes) -> bool:
    """What the module docstring calls blank: UTF-8 text that is whitespace only, less a CR and a BOM."""
    try:
        text = line.removesuffix(b"\r").decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not text.removeprefix("\ufeff").strip()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def check_rows(uri: str, rows: list[dict]) -> None:
    """What every row of every manifest must be."""
    for row in rows:
        assert tuple(row) == schema.INPUT_COLUMNS and row[schema.MANIFEST] == uri
        assert len(row[schema.UTTERANCE_ID]) == 32
        if row[schema.STATUS] == schema.STATUS_OK:
            assert row[schema.ERROR] == "" and row[schema.AUDIO_FILEPATH]
            assert math.isfinite(row[schema.OFFSET]) and row[schema.OFFSET] >= 0
            assert math.isfinite(row[schema.DURATION]) and row[schema.DURATION] >= 0
            assert row[schema.UTTERANCE_ID] == utterance_identity(
                row[schema.AUDIO_FILEPATH], row[schema.OFFSET], row[schema.DURATION], row[schema.CHANNEL],
                row[schema.SOURCE_ID])
            json.loads(row[schema.EXTRA])
        else:
            assert row[schema.STATUS] == schema.STATUS_ERROR
            assert row[schema.ERROR].startswith(f"{uri}, line {row[schema.LINE]}: ")
            assert "\n" not in row[schema.ERROR]
            assert "cannot read the line (" not in row[schema.ERROR]  # parse_line's net for its own bugs
    pa.Table.from_pylist(rows, schema=schema.INPUT_SCHEMA)  # what the next stage does with them


def check_line_numbers(rows: list[dict], complete: list[bytes], broken: bool) -> None:
    """One row per non-blank line of `complete` (then one error row if the file `broken` after them), or the
    one row of a binary file, whose first non-blank line does not start with "{"."""
    expected = [number for number, line in enumerate(complete, start=1) if not is_blank(line)]
    if broken:
        expected.append(len(complete) + 1)
    if any("not a text manifest" in row[schema.ERROR] for row in rows):
        (row,) = rows
        first = next(i for i, line in enumerate(complete) if line.removeprefix("\ufeff".encode()).lstrip(ASCII_SPACE))
        assert row[schema.LINE] == first + 1 and not complete[first].lstrip(ASCII_SPACE).startswith(b"{")
        return
    assert [row[schema.LINE] for row in rows] == expected
    if broken:
        assert rows[-1][schema.STATUS] == schema.STATUS_ERROR
        assert any(p in rows[-1][schema.ERROR] for p in ("compressed data broken after line", "not a gzip file"))


def check_sniff(uri: str, rows: list[dict]) -> None:
    """sniff_manifest names a problem only where no row is usable, and says "no line" exactly where none came."""
    problem = sniff_manifest(uri)
    assert problem is None or (problem.startswith(f"{uri}: ") and "\n" not in problem)
    assert (problem is not None and "no line to transcribe" in problem) == (rows == [])
    if problem is not None:
        assert all(row[schema.STATUS] == schema.STATUS_ERROR for row in rows)
    else:
        assert any(not any(p in row[schema.ERROR] for p in FILE_PROBLEMS) for row in rows)


def physical_lines(data: bytes) -> list[bytes]:
    """The lines of a file: what "\n" separates, less the nothing after a last "\n"."""
    return data.removesuffix(b"\n").split(b"\n") if data else []


@settings(FUZZ, max_examples=700)
@given(manifest=manifests(), utf16=st.booleans())
def test_plain_and_utf16_manifests_give_one_row_per_non_blank_line(folder, manifest, utf16):
    drawn, data = manifest
    path = folder / "m.json"
    lines_known = data[:2] not in UTF16_BOMS  # random bytes starting like UTF-16 are read as UTF-16
    if utf16:
        try:
            data = "\ufeff".encode("utf-16-le") + data.decode("utf-8").encode("utf-16-le")
            lines_known = True
        except UnicodeDecodeError:
            pass  # lines that are not UTF-8 have no UTF-16 form
    path.write_bytes(data)
    rows = list(read_manifest(str(path)))
    check_rows(str(path), rows)
    if lines_known:
        check_line_numbers(rows, drawn, broken=False)
    check_sniff(str(path), rows)


@settings(FUZZ, max_examples=500)
@given(manifest=manifests(), cut=st.one_of(st.none(), st.floats(0, 1, exclude_max=True)))
def test_gzipped_manifests_cut_short_give_their_complete_lines_then_one_error_row(folder, manifest, cut):
    _, data = manifest
    compressed = gzip.compress(data, mtime=0)
    if cut is None:
        complete = physical_lines(data)
    else:
        compressed = compressed[: max(1, int(len(compressed) * cut))]
        # what zlib gets out of the bytes left, up to its last newline, is every complete line
        complete = zlib.decompressobj(wbits=31).decompress(compressed).split(b"\n")[:-1]
    path = folder / "m.jsonl.gz"
    path.write_bytes(compressed)
    rows = list(read_manifest(str(path)))
    check_rows(str(path), rows)
    if data[:2] not in UTF16_BOMS:
        check_line_numbers(rows, complete, broken=cut is not None)
    check_sniff(str(path), rows)


@settings(FUZZ, max_examples=500)
@given(data=st.one_of(st.binary(max_size=3000), st.binary(max_size=40).map(lambda b: b * 50)),
       suffix=st.sampled_from([".json", ".json.gz"]))
def test_random_bytes_never_raise_and_give_only_documented_rows(folder, data, suffix):
    path = folder / f"random{suffix}"
    path.write_bytes(data)
    rows = list(read_manifest(str(path)))
    check_rows(str(path), rows)
    if suffix == ".json":
        if data[:2] not in UTF16_BOMS:
            check_line_numbers(rows, physical_lines(data), broken=False)
    elif data and not data.startswith(b"\x1f\x8b"):
        (row,) = rows
        assert f"{path}, line 1: not a gzip file (BadGzipFile: " in row[schema.ERROR]
    check_sniff(str(path), rows)
