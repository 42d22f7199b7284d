from __future__ import annotations

import json
import pickle
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import schema
from pipeline.io.claim import IdentityMismatch, check_identity
from pipeline.io.sink import (
    CONFIG_FILE,
    Deduplicated,
    IdSet,
    committed_ids,
    deduplicate,
    is_complete,
    list_parts,
    mark_success,
    part_name,
    read_output,
    read_parts,
    to_output_table,
    write_json,
    write_part,
)


def rows(ids, text="hi"):
    return to_output_table({
        schema.UTTERANCE_ID: ids,
        schema.TEXT: [f"{text} {i}" for i in ids],
        schema.WORDS: [[{"word": text, "start": 0.0, "end": 0.5, "confidence": 0.9}] for _ in ids],
        schema.STATUS: [schema.STATUS_OK] * len(ids),
    })


def test_parts_are_named_by_content_and_rewrites_are_idempotent(tmp_path):
    output = str(tmp_path / "out")
    first = write_part(output, rows(["b", "a"]))
    assert first == part_name(["a", "b"])
    assert write_part(output, rows(["a", "b"])) == first  # a retried task: same name, nothing added
    write_part(output, rows(["c"]))
    assert len(list_parts(output)) == 2
    assert set(committed_ids(output)) == {"a", "b", "c"}
    assert not any(p.name.startswith(".tmp") for p in (tmp_path / "out").iterdir())


def test_output_reads_back_with_schema_and_words(tmp_path):
    output = str(tmp_path / "out")
    write_part(output, rows(["x", "y"]))
    mark_success(output, {"rows_ok": 2})
    table = read_output(output)
    assert table.schema == schema.OUTPUT_SCHEMA
    assert sorted(table.column(schema.UTTERANCE_ID).to_pylist()) == ["x", "y"]
    assert table.column(schema.WORDS).to_pylist()[0] == [
        {"word": "hi", "start": 0.0, "end": 0.5, "confidence": 0.8999999761581421}]
    # plain Parquet readers see the transcripts and skip the metadata files
    assert pq.read_table(output).num_rows == 2
    assert is_complete(output)
    assert json.loads((tmp_path / "out" / "_summary.json").read_text()) == {"rows_ok": 2}


def test_deduplicate_leaves_every_row_once(tmp_path):
    output = str(tmp_path / "out")
    write_part(output, rows(["a", "b", "c"]))
    write_part(output, rows(["c", "d"]))  # "c" twice, as a re-batched retry could produce
    write_part(output, rows(["e"]))
    assert deduplicate(output).duplicates == 1
    ids = read_output(output).column(schema.UTTERANCE_ID).to_pylist()
    assert sorted(ids) == ["a", "b", "c", "d", "e"]
    assert deduplicate(output).duplicates == 0


def test_an_utterance_listed_twice_in_one_part_is_kept_once(tmp_path):
    output = str(tmp_path / "out")
    write_part(output, rows(["a", "b", "a", "c", "b"]))  # a manifest naming the same utterances twice
    assert deduplicate(output).duplicates == 2
    assert sorted(read_output(output).column(schema.UTTERANCE_ID).to_pylist()) == ["a", "b", "c"]


def error_rows(ids):
    table = rows(ids).to_pylist()
    for row in table:
        row.update({schema.STATUS: schema.STATUS_ERROR, schema.TEXT: None, schema.WORDS: None,
                    schema.ERROR: "m.json, line 1: cannot read the audio"})
    return to_output_table({name: [row[name] for row in table] for name in schema.OUTPUT_SCHEMA.names})


def test_a_retried_error_row_gives_way_to_its_ok_row_in_any_part(tmp_path):
    """--retry-errors: the rerun's ok row is kept whether its part sorts before or after the error row's, and
    an error row is still kept where no ok row exists; the resume scan then skips only the ok ids."""
    output = str(tmp_path / "out")
    write_part(output, error_rows(["a", "b"]))
    write_part(output, rows(["c"]))
    assert set(committed_ids(output)) == {"a", "b", "c"}
    assert set(committed_ids(output, ok_only=True)) == {"c"}
    for retried in (["a"], ["b", "z"]):  # part names are hashes: one sorts before the error part, one after
        write_part(output, rows(retried))
    write_part(output, error_rows(["z"]))  # an error row beside an ok row of the same id, in a later part
    assert deduplicate(output) == Deduplicated(duplicates=0, errors_replaced=3)
    table = read_output(output).to_pylist()
    assert sorted(r[schema.UTTERANCE_ID] for r in table) == ["a", "b", "c", "z"]
    assert {r[schema.STATUS] for r in table} == {schema.STATUS_OK}
    write_part(output, error_rows(["e", "f"]))
    write_part(output, error_rows(["e"]))  # two error rows of one id: the first in part-name order stays
    assert deduplicate(output) == Deduplicated(duplicates=1, errors_replaced=0)
    assert set(committed_ids(output, ok_only=True)) == {"a", "b", "c", "z"}
    assert sorted(read_output(output).column(schema.UTTERANCE_ID).to_pylist()) == ["a", "b", "c", "e", "f", "z"]


IDENTITY = {"model": {"uri": "m.nemo"}, "decoding": {"strategy": "greedy"}}


def test_an_output_of_the_line_number_identity_is_refused_and_a_content_one_resumes(tmp_path):
    output = str(tmp_path / "out")
    write_json(output, CONFIG_FILE, {"identity": IDENTITY})  # as loopscribe wrote it before content ids
    check_identity(output, IDENTITY)  # nothing committed yet: nothing to mix up
    write_part(output, rows(["a"]))
    with pytest.raises(IdentityMismatch, match="identified rows by manifest line.*write to a new output"):
        check_identity(output, IDENTITY)
    write_json(output, CONFIG_FILE, {"identity": IDENTITY, "row_identity": schema.ROW_IDENTITY})
    check_identity(output, IDENTITY)
    with pytest.raises(IdentityMismatch, match="another model or decoding"):
        check_identity(output, {**IDENTITY, "decoding": {"strategy": "alsd"}})


def test_many_parts_read_concurrently_keep_name_order_and_first_part_wins(tmp_path):
    output = str(tmp_path / "out")
    for index in range(50):  # more parts than reading threads
        write_part(output, rows([f"u{index:02d}", f"u{index + 1:02d}"], text=f"part{index}"))
    paths = list_parts(output)
    read = list(read_parts(output, [schema.UTTERANCE_ID, schema.TEXT]))
    assert [path for path, _ in read] == paths
    assert all(pq.read_table(path).select([schema.UTTERANCE_ID, schema.TEXT]).equals(table) for path, table in read)
    assert read_output(output, columns=[schema.STATUS]).column_names == [schema.STATUS]
    assert read_output(str(tmp_path / "none"), columns=[schema.STATUS]).column_names == [schema.STATUS]
    # every id but u00 and u50 is in two parts: the part first in name order keeps it
    first_owner = {}
    for _, table in read:
        for utterance_id, text in zip(*table.to_pydict().values()):
            first_owner.setdefault(utterance_id, text)
    assert deduplicate(output).duplicates == 49
    table = read_output(output)
    assert dict(zip(table.column(schema.UTTERANCE_ID).to_pylist(), table.column(schema.TEXT).to_pylist())) == \
        first_owner


def test_deduplicate_loses_nothing_when_a_rewritten_part_takes_a_later_parts_name(tmp_path):
    """Parts {x}, {x, y, z}, {y, z} in name order: the middle one, rewritten without x, is named like the last,
    which is all duplicates and goes; y and z must survive."""
    for suffix in range(10_000):  # ids whose part names sort in the order the case needs
        x, y, z = (f"{name}{suffix}" for name in "xyz")
        names = [part_name(ids) for ids in ([x], [x, y, z], [y, z])]
        if names == sorted(names):
            break
    assert names == sorted(names), "no ids found whose part names give the order this case needs"
    output = str(tmp_path / "out")
    write_part(output, rows([x], text="first"))
    write_part(output, rows([x, y, z], text="second"))
    write_part(output, rows([y, z], text="third"))
    assert deduplicate(output).duplicates == 3
    table = read_output(output)
    assert dict(zip(table.column(schema.UTTERANCE_ID).to_pylist(), table.column(schema.TEXT).to_pylist())) == {
        x: f"first {x}", y: f"second {y}", z: f"second {z}"}


def test_missing_output_has_nothing_committed(tmp_path):
    assert len(committed_ids(str(tmp_path / "none"))) == 0
    assert read_output(str(tmp_path / "none")).num_rows == 0


def test_parts_written_by_another_process_are_seen_on_s3():
    """The driver lists the output at the start and at the end; the writer actors add parts in between with
    their own clients. A listing cached by the driver's s3fs instance must not hide those parts."""
    import pyarrow as pa
    import s3fs

    from tests.support.s3_server import moto_s3

    with moto_s3("sinkbucket"):
        output = "s3://sinkbucket/out"
        write_json(output, "_config.json", {"job": 1})  # as the driver does first
        assert set(committed_ids(output)) == set() and not is_complete(output)  # lists (and caches) the folder
        writer = s3fs.S3FileSystem(skip_instance_cache=True)  # another process's client
        with writer.open("sinkbucket/out/" + part_name(["a", "b"]), "wb") as handle:
            pq.write_table(rows(["a", "b"]), handle)
        writer.pipe("sinkbucket/out/_SUCCESS", b"")
        assert set(committed_ids(output)) == {"a", "b"} and is_complete(output)
        assert read_output(output).num_rows == 2 and isinstance(read_output(output), pa.Table)


def test_a_part_that_cannot_be_written_names_the_output_and_leaves_nothing_behind(tmp_path, monkeypatch):
    from pipeline.io import sink

    blocked = tmp_path / "a_file"
    blocked.write_text("not a folder")
    with pytest.raises(sink.PartWriteError, match=f"cannot commit a part to {blocked}/out/part-.*NotADirectory"):
        write_part(str(blocked / "out"), rows(["a"]))

    def disk_full(table, where, **kwargs):
        with open(where, "wb") as handle:
            handle.write(b"PAR1 half")  # a half-written temporary, as a full disk leaves one
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sink.pq, "write_table", disk_full)
    output = tmp_path / "out"
    with pytest.raises(sink.PartWriteError, match="No space left on device"):
        write_part(str(output), rows(["a", "b"]))
    assert list(output.iterdir()) == [] and len(committed_ids(str(output))) == 0


def test_an_utterance_in_three_parts_and_twice_in_one_keeps_its_first_ok_row(tmp_path):
    """Rows of mixed statuses, an id in three parts and twice in one: whatever order the part names give, each id
    keeps its first ok row in part-name order (its first row where it has none), a part left with no rows goes,
    and the others are rewritten under the names of the rows they keep."""
    output = str(tmp_path / "out")
    parts = {"p1": [("a", False), ("b", True), ("a", True)],  # an error row and the ok row of one id in one part
             "p2": [("a", False), ("c", True), ("b", False)],
             "p3": [("a", True), ("c", False), ("d", False), ("d", False)],
             "p4": [("e", True), ("e", True)],
             "p5": [("b", False), ("e", False)]}  # only error rows of ids that have ok rows: removed whole
    for tag, entries in parts.items():
        table = rows([i for i, _ in entries]).to_pylist()
        for row_index, (row, (_, ok)) in enumerate(zip(table, entries)):
            row.update({schema.TEXT: f"{tag}/{row_index}",
                        schema.STATUS: schema.STATUS_OK if ok else schema.STATUS_ERROR})
        write_part(output, to_output_table({name: [row[name] for row in table] for name in schema.OUTPUT_SCHEMA.names}))
    before = [(path.rsplit("/", 1)[-1], table.to_pylist())
              for path, table in read_parts(output, [schema.UTTERANCE_ID, schema.TEXT, schema.STATUS])]
    kept: dict[str, dict] = {}
    for _, part_rows in before:  # the rule, one row at a time in part-name order
        for row in part_rows:
            first = kept.get(row[schema.UTTERANCE_ID])
            if first is None or (row[schema.STATUS] == schema.STATUS_OK and first[schema.STATUS] != schema.STATUS_OK):
                kept[row[schema.UTTERANCE_ID]] = row
    expected_parts = set()
    for name, part_rows in before:
        left = [row[schema.UTTERANCE_ID] for row in part_rows if any(row is k for k in kept.values())]
        if left:
            expected_parts.add(name if len(left) == len(part_rows) else part_name(left))

    assert deduplicate(output) == Deduplicated(duplicates=3, errors_replaced=6)
    after = read_output(output, [schema.UTTERANCE_ID, schema.TEXT, schema.STATUS]).to_pylist()
    assert sorted(after, key=lambda row: row[schema.UTTERANCE_ID]) == [kept[i] for i in sorted(kept)]
    assert {kept[i][schema.STATUS] for i in "abce"} == {schema.STATUS_OK}
    assert {path.rsplit("/", 1)[-1] for path in list_parts(output)} == expected_parts
    assert deduplicate(output) == Deduplicated(duplicates=0, errors_replaced=0)


def test_the_id_set_answers_as_a_python_set_does():
    """Ids of every length around the array's width (a longer one must not match its own first bytes), with
    shared prefixes, non-ASCII, and a set built from parts of different widths."""
    generator = random.Random(0)
    alphabet = "ab\u00e9\u4e2d0"
    members = {"".join(generator.choice(alphabet) for _ in range(generator.randint(1, 6))) for _ in range(300)}
    parts = [IdSet([i for i in members if len(i) <= 3]), IdSet([i for i in members if len(i) > 3]), IdSet()]
    ids = IdSet.union(parts)
    assert set(ids) == members and len(ids) == len(members)
    queries = sorted(members) + ["".join(generator.choice(alphabet) for _ in range(generator.randint(1, 9)))
                                 for _ in range(500)] + [max(members, key=len) + "x", ""]
    assert ids.contains(queries).tolist() == [q in members for q in queries]
    assert all((q in ids) == (q in members) for q in queries[::7])
    travelled = pickle.loads(pickle.dumps(ids))  # what a read task receives
    assert travelled.contains(queries).tolist() == [q in members for q in queries]
    assert IdSet().contains(["a"]).tolist() == [False] and ids.contains([]).tolist() == []


def test_a_million_committed_ids_arrive_in_a_read_task_as_their_own_bytes():
    """What each manifest-reading task unpickles: 32 MB for a million 32-digit ids (a Python set of them: ~113 MB,
    a string object each)."""
    import tracemalloc

    travelling = pickle.dumps(IdSet(f"{i:032x}" for i in range(1_000_000)))
    tracemalloc.start()
    try:
        ids = pickle.loads(travelling)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(ids) == 1_000_000 and f"{123_456:032x}" in ids and f"{2_000_000:032x}" not in ids
    assert peak < 40 * 2**20


GREEDY = {"model": {"uri": "m.nemo", "content_sha256": "a" * 64},
          "decoding": {"strategy": "greedy", "beam_size": 4, "blank": 0, "c": 0}}
ALSD = {**GREEDY, "decoding": {"strategy": "alsd", "beam_size": 4}}


def claim_at_once(output, identities):
    """`claim_output` called by one thread per identity, released together: what each got (True, False or the
    IdentityMismatch raised)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.io.claim import claim_output

    start = threading.Barrier(len(identities))

    def claim(identity):
        start.wait(timeout=30)
        try:
            return claim_output(output, identity)
        except IdentityMismatch as error:
            return error

    with ThreadPoolExecutor(max_workers=len(identities)) as pool:
        return list(pool.map(claim, identities))


def check_one_claim_won(output, identities, outcomes):
    from pipeline.io.claim import read_identity

    assert sum(outcome is True for outcome in outcomes) == 1, outcomes
    winner = identities[outcomes.index(True)]
    assert read_identity(output)["identity"] == winner
    for identity, outcome in zip(identities, outcomes):
        if identity == winner:
            assert outcome in (True, False)  # a job of the same identity shares the output
        else:
            assert isinstance(outcome, IdentityMismatch), outcome
            message = str(outcome)
            assert "\n" not in message and len(message) < 400, message
            assert 'decoding.strategy is "' in message and "write to a new output" in message


def test_jobs_of_two_decodings_claiming_one_new_output_at_once_leave_exactly_one_claim(tmp_path):
    for attempt in range(5):  # each time a new output: the race is on creating the claim
        output = str(tmp_path / f"out{attempt}")
        identities = [GREEDY, ALSD] * 4
        check_one_claim_won(output, identities, claim_at_once(output, identities))
        assert not [p for p in (tmp_path / f"out{attempt}").iterdir() if p.name.startswith(".tmp")]


def test_an_s3_output_is_claimed_by_a_conditional_put_exactly_once():
    pytest.importorskip("moto")
    from tests.support.s3_server import moto_s3

    with moto_s3("claimbucket"):
        for attempt in range(3):
            output = f"s3://claimbucket/out{attempt}"
            identities = [GREEDY, ALSD] * 3
            check_one_claim_won(output, identities, claim_at_once(output, identities))


def test_a_refusal_is_one_line_naming_the_setting_that_differs_and_both_values(tmp_path):
    from pipeline.io.claim import CLAIM_FILE, claim_output, identity_differences

    output = str(tmp_path / "out")
    assert claim_output(output, GREEDY) is True
    assert claim_output(output, GREEDY) is False  # the same kind of results: shared
    # a setting only one side knows (a later version's) does not make them differ
    assert claim_output(output, {**GREEDY, "decoding": {**GREEDY["decoding"], "new_knob": 1}}) is False
    with pytest.raises(IdentityMismatch) as refused:
        claim_output(output, {**ALSD, "decoding": {"strategy": "alsd", "beam_size": 8, "lm_weight": 0.5},
                              "long_audio": {"chunk_s": 30}})
    message = str(refused.value)
    assert message.startswith(f'{output} holds results of another model or decoding: decoding.strategy is "greedy" '
                              'there, "alsd" here, decoding.beam_size is 4 there, 8 here (_identity.json, claimed by ')
    with pytest.raises(IdentityMismatch, match=r"decoding.beam_size is 4 there, 8 here, decoding.blank is 0 there, 1 "
                                               r"here \(and 1 more settings\) \(_identity.json"):
        claim_output(output, {**GREEDY, "decoding": {**GREEDY["decoding"], "beam_size": 8, "blank": 1, "c": 2}})
    assert claim_output(output, GREEDY) is False
    assert message.endswith("; write to a new output, or delete this one to start over") and "\n" not in message
    replaced = {**GREEDY, "model": {"uri": "m.nemo", "content_sha256": "b" * 64}}
    with pytest.raises(IdentityMismatch, match="its model's content is sha256:aaaaaaaaaaaaaaaa there, "
                                               "sha256:bbbbbbbbbbbbbbbb here .a model file replaced"):
        claim_output(output, replaced)
    assert identity_differences(GREEDY, replaced) == [("model.content_sha256", "a" * 64, "b" * 64)]
    assert json.loads((tmp_path / "out" / CLAIM_FILE).read_text())["identity"] == GREEDY


def test_an_output_cut_at_pauses_before_segmentation_existed_is_not_resumed_with_the_vad(tmp_path):
    from pipeline.io.claim import claim_output

    output = str(tmp_path / "out")
    before = {**GREEDY, "long_audio": {"chunk_s": 30.0, "overlap_s": 4.0}}  # written before `segment` existed
    assert claim_output(output, before) is True
    with pytest.raises(IdentityMismatch, match='long_audio.segment is "pauses" there, "vad" here'):
        claim_output(output, {**GREEDY, "long_audio": {"chunk_s": 30.0, "overlap_s": 4.0, "segment": "vad",
                                                       "vad_threshold": 0.5}})
    assert claim_output(output, {**GREEDY, "long_audio": {"chunk_s": 30.0, "overlap_s": 4.0, "segment": "pauses",
                                                          "vad_threshold": 0.5}}) is False


def test_an_output_of_an_earlier_version_is_checked_against_its_config_then_claimed(tmp_path):
    from pipeline.io.claim import CLAIM_FILE, claim_output

    output = str(tmp_path / "out")
    earlier = {"model": {"uri": "m.nemo", "sha256": None, "cache_dir": None}, "decoding": {"strategy": "greedy"}}
    write_json(output, CONFIG_FILE, {"identity": earlier, "row_identity": schema.ROW_IDENTITY})
    write_part(output, rows(["a"]))
    with pytest.raises(IdentityMismatch, match=r'decoding.strategy is "greedy" there, "alsd" here \(_config.json\)'):
        claim_output(output, {"model": {"uri": "m.nemo", "content_sha256": "a" * 64}, "decoding": {"strategy": "alsd"}})
    assert not (tmp_path / "out" / CLAIM_FILE).exists()
    assert claim_output(output, {"model": {"uri": "m.nemo", "content_sha256": "a" * 64},
                                 "decoding": {"strategy": "greedy"}}) is True


def test_success_lists_the_parts_and_readers_read_exactly_those(tmp_path):
    """`_SUCCESS` names the parts of the complete output: a part a later job adds is not read until that job's
    `_SUCCESS`, a listed part gone is an error naming it, and without `_SUCCESS` the folder is read."""
    from pipeline.io import sink

    output = str(tmp_path / "out")
    write_part(output, rows(["a", "b"]))
    part_of_c = write_part(output, rows(["c"]))
    mark_success(output, {"rows": 3})
    listed = json.loads((tmp_path / "out" / "_SUCCESS").read_text())["parts"]
    assert sorted(listed) == sorted(path.rsplit("/", 1)[-1] for path in list_parts(output))
    write_part(output, rows(["d"]))  # a job started on the output since, writing
    assert sorted(read_output(output).column(schema.UTTERANCE_ID).to_pylist()) == ["a", "b", "c"]
    assert read_output(output, every_part=True).num_rows == 4
    (tmp_path / "out" / part_of_c).unlink()  # that job's dedupe removed a listed part
    with pytest.raises(FileNotFoundError, match=f"{part_of_c} is listed in {output}/_SUCCESS but is gone"):
        read_output(output)
    sink.mark_incomplete(output)
    sink.mark_incomplete(output)  # none there: nothing to do
    assert not is_complete(output) and read_output(output).num_rows == 3
    (tmp_path / "out" / "_SUCCESS").write_text("")  # as an earlier loopscribe wrote it
    assert read_output(output).num_rows == 3


def test_a_part_removed_by_a_dedupe_while_it_is_read_is_replaced_by_a_fresh_listing(tmp_path, monkeypatch):
    """A resume scan that lists the parts just before another job's dedupe rewrites one of them still finds every
    committed id (the rewrite, listed afresh), instead of failing on the part that vanished."""
    from pipeline.io import sink

    output = str(tmp_path / "out")
    write_part(output, rows(["a", "b"]))
    write_part(output, rows(["b", "c", "d"]))
    listing = sink.list_parts

    def listed_then_deduplicated(uri):
        paths = listing(uri)
        if len(paths) == 2:  # the scan's first listing; then the other job's dedupe, then the reads
            monkeypatch.setattr(sink, "list_parts", listing)
            assert sink.deduplicate(uri).duplicates == 1
            assert not set(paths) <= set(listing(uri))  # a listed part is gone
        return paths

    monkeypatch.setattr(sink, "list_parts", listed_then_deduplicated)
    assert set(committed_ids(output)) == {"a", "b", "c", "d"}


def test_an_id_set_from_an_arrow_column_is_the_set_of_its_strings():
    """Made from the column's bytes (what the resume scan does): ids of mixed lengths, non-ASCII, nulls left out,
    several chunks, a slice of a larger array (its offsets do not start at 0), 32- and 64-bit offsets."""
    generator = random.Random(1)
    alphabet = "ab\u00e9\u4e2d0"
    values = ["".join(generator.choice(alphabet) for _ in range(generator.randint(1, 11))) for _ in range(2000)]
    values[::97] = [None] * len(values[::97])
    wanted = {value for value in values if value is not None}
    chunked = pa.chunked_array([pa.array(values[:700]), pa.array(values[700:])])
    for column in (chunked, pa.array(values, pa.large_string()), pa.array(["skipped"] * 5 + values).slice(5)):
        ids = IdSet.from_arrow(column)
        assert set(ids) == wanted and len(ids) == len(wanted)
        queries = sorted(wanted)[::3] + ["zz", "", max(wanted, key=len) + "a"]
        assert ids.contains(queries).tolist() == [q in wanted for q in queries]
    hex_ids = [f"{i:032x}" for i in random.Random(2).sample(range(10**9), 5000)]  # every id as long: the fast path
    assert list(IdSet.from_arrow(pa.array(hex_ids))) == sorted(hex_ids) == list(IdSet(hex_ids))
    assert len(IdSet.from_arrow(pa.array([], pa.string()))) == 0

