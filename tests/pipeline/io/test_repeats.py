"""Repeats counted exactly (`pipeline/io/sink.py`: `part_name`, `deduplicate`).

Before, a part was named by its utterance ids alone: a manifest passed twice (a copy caught by a glob) whose rows
were batched alike made parts of the same names, the second written over the first, so 400 lines gave 200 rows with
`duplicates_removed: 0`, and which copy's reference text and extra keys survived depended on write order.
"""

from __future__ import annotations

import json

from pipeline import schema
from pipeline.io.sink import Deduplicated, deduplicate, list_parts, part_name, read_output, to_output_table, write_part


def listed(manifest: str, lines: range, texts: dict[int, str] | None = None,
           extras: dict[int, dict] | None = None) -> list[dict]:
    """Output rows of `lines` of `manifest`: utterance `u<line>` listed at that line."""
    texts, extras = texts or {}, extras or {}
    return [{schema.UTTERANCE_ID: f"u{line:03d}", schema.MANIFEST: manifest, schema.LINE: line,
             schema.REFERENCE_TEXT: texts.get(line, f"words of {line}"), schema.EXTRA: json.dumps(extras.get(line, {})),
             schema.TEXT: f"text {line}", schema.STATUS: schema.STATUS_OK} for line in lines]


def commit(output: str, rows: list[dict], part_rows: int) -> None:
    """`rows` committed as the writer stage does, `part_rows` to a part."""
    for start in range(0, len(rows), part_rows):
        batch = rows[start:start + part_rows]
        columns = {name: [row.get(name) for row in batch] for name in schema.OUTPUT_SCHEMA.names}
        write_part(output, to_output_table(columns))


def test_a_manifest_and_its_copy_batched_alike_keep_both_parts_and_every_repeat_is_counted(tmp_path):
    output = str(tmp_path / "out")
    lines = range(1, 21)
    commit(output, listed("/data/m.json", lines), part_rows=8)
    commit(output, listed("/data/copy/m.json", lines), part_rows=8)  # the same utterances, the same batches
    assert len(list_parts(output)) == 6  # the copy's parts are parts of their own, not the first ones rewritten
    assert deduplicate(output) == Deduplicated(duplicates=20, errors_replaced=0)
    table = read_output(output)
    assert sorted(table.column(schema.UTTERANCE_ID).to_pylist()) == [f"u{line:03d}" for line in lines]
    assert set(table.column(schema.MANIFEST).to_pylist()) == {"/data/copy/m.json"}  # the first manifest by name


def test_a_retried_part_keeps_its_name_and_a_part_of_no_manifest_is_named_by_its_ids(tmp_path):
    output = str(tmp_path / "out")
    rows = listed("/data/m.json", range(1, 5))
    commit(output, rows, part_rows=4)
    commit(output, rows, part_rows=4)  # a retried task: the same rows, the same part
    assert len(list_parts(output)) == 1 and deduplicate(output).duplicates == 0
    assert write_part(output, to_output_table({schema.UTTERANCE_ID: ["b", "a"], schema.STATUS: ["ok", "ok"]})) == \
        part_name(["a", "b"])


def test_repeats_that_disagree_on_reference_text_or_extra_keys_are_reported_and_the_first_listing_kept(tmp_path):
    output = str(tmp_path / "out")
    lines = range(1, 11)
    first = listed("s3://bucket/a.json", lines, texts={3: "the right words"})
    second = listed("s3://bucket/b.json", lines, texts={3: "other words", 7: "changed"},
                    extras={7: {"speaker": 2}, 9: {"speaker": 2}})
    commit(output, second, part_rows=4)  # the copy first and batched otherwise: part-name order does not decide
    commit(output, first, part_rows=3)
    deduplicated = deduplicate(output)
    assert (deduplicated.duplicates, deduplicated.errors_replaced, deduplicated.conflicting) == (10, 0, 3)
    assert list(deduplicated.conflict_examples) == [
        "s3://bucket/a.json, line 3 and s3://bucket/b.json, line 3: reference_text differs (the first is kept)",
        "s3://bucket/a.json, line 7 and s3://bucket/b.json, line 7: reference_text and extra differ (the first is "
        "kept)",
        "s3://bucket/a.json, line 9 and s3://bucket/b.json, line 9: extra differs (the first is kept)"]
    table = read_output(output)
    assert set(table.column(schema.MANIFEST).to_pylist()) == {"s3://bucket/a.json"}
    kept = dict(zip(table.column(schema.LINE).to_pylist(), table.column(schema.REFERENCE_TEXT).to_pylist()))
    assert kept[3] == "the right words" and kept[7] == "words of 7"
    assert deduplicate(output) == Deduplicated(duplicates=0, errors_replaced=0)


def test_an_ok_row_is_kept_over_an_error_row_whatever_its_listing(tmp_path):
    output = str(tmp_path / "out")
    first = listed("/a.json", range(1, 3))
    first[0][schema.STATUS] = schema.STATUS_ERROR
    commit(output, first, part_rows=2)
    commit(output, listed("/b.json", range(1, 3)), part_rows=2)
    assert deduplicate(output) == Deduplicated(duplicates=1, errors_replaced=1)
    table = read_output(output).sort_by(schema.LINE)
    assert table.column(schema.MANIFEST).to_pylist() == ["/b.json", "/a.json"]
