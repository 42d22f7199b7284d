"""The job's stages, called directly (no Ray): bad rows become error rows, good rows decode as in-process.

The model is a small random NeMo model calibrated to emit about one label per 3 frames (tests/pipeline/
conftest.py). "In-process" means `recognize` on one utterance at a time, so the checks also prove that length
bucketing and padding change nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline import schema
from pipeline.config import DecodingConfig, ModelConfig, ResourcesConfig
from pipeline.decoding.plan import DecodingError, compact_ctc_log_probs, describe, plan_decoding
from pipeline.decoding.recognize import pad_waveforms, recognize, transcript_of
from pipeline.io import sink
from pipeline.io.manifest import read_manifest
from pipeline.model.actor import load_model
from pipeline.model.nemo_file import read_model_facts
from pipeline.stages.asr import TranscribeBatch
from pipeline.stages.audio import LoadAudio
from pipeline.stages.read import ReadManifests
from pipeline.stages.write import FinishAndWrite

pytestmark = pytest.mark.nemo


def write_manifest(path, entries):
    with open(path, "w") as handle:
        for entry in entries:
            handle.write(entry if isinstance(entry, str) else json.dumps(entry))
            handle.write("\n")
    return str(path)


@pytest.fixture(scope="module")
def rows(nemo_assets, tmp_path_factory):
    """A manifest of the 8 good files plus one of each kind of bad row, as the table stage 1 yields."""
    folder = tmp_path_factory.mktemp("stage-rows")
    (folder / "corrupt.wav").write_bytes(nemo_assets["files"][0].read_bytes()[:30])
    (folder / "empty.wav").write_bytes(b"")
    (folder / "text.wav").write_text("this is not audio\n" * 50)
    good = [{"audio_filepath": str(path), "duration": 9.0, "text": f"utterance {i}"}
            for i, path in enumerate(nemo_assets["files"])]
    bad = [
        {"audio_filepath": str(folder / "missing.wav"), "duration": 1.0},
        {"audio_filepath": "corrupt.wav", "duration": 1.0},  # relative: resolved against the manifest's folder
        {"audio_filepath": "empty.wav", "duration": 1.0},
        {"audio_filepath": "text.wav", "duration": 1.0},
        '{"audio_filepath": "x.wav", "duration": ',
        {"duration": 1.0},
        {"audio_filepath": str(nemo_assets["files"][0]), "duration": -1.0},
    ]
    manifest = write_manifest(folder / "manifest.json", good[:4] + bad + good[4:])
    return pa.Table.from_pylist(list(read_manifest(manifest)), schema=schema.INPUT_SCHEMA)


@pytest.fixture(scope="module")
def model_config(nemo_assets):
    return ModelConfig(uri=str(nemo_assets["checkpoints"]["tdt_ctc"]))


def load_once():
    cache = {}

    def load(model, device):
        if model.uri not in cache:
            cache[model.uri] = load_model(model, device)
        return cache[model.uri]

    return load


LOAD = load_once()


SMALL_BUCKETS = ResourcesConfig(batch_audio_s=12.0)  # several buckets out of the 8 utterances


def plan(model_config, decoding=None):
    return plan_decoding(read_model_facts(model_config.uri), decoding or DecodingConfig())


def run_stages(rows_table, model_config, decoding, output, resources=SMALL_BUCKETS):
    audio = LoadAudio(sample_rate=16000)(rows_table)
    decoded = TranscribeBatch(model_config, plan(model_config, decoding), resources, load=LOAD)(audio)
    summary = FinishAndWrite(model_config, plan(model_config, decoding), str(output), "test-model")(decoded)
    return audio, summary


def test_bad_rows_become_error_rows_naming_manifest_line_and_cause(rows, model_config, tmp_path):
    audio, summary = run_stages(rows, model_config, DecodingConfig(), tmp_path / "out")
    table = sink.read_output(str(tmp_path / "out"))
    assert table.num_rows == rows.num_rows == 15
    assert sorted(table.column(schema.UTTERANCE_ID).to_pylist()) == sorted(rows.column(schema.UTTERANCE_ID)
                                                                          .to_pylist())
    by_line = {r[schema.LINE]: r for r in table.to_pylist()}
    manifest = rows.column(schema.MANIFEST)[0].as_py()
    expected_errors = {5: "file not found", 6: "not decodable audio", 7: "empty file", 8: "not decodable audio",
                       9: "malformed JSON", 10: "missing key 'audio_filepath'", 11: "must not be negative"}
    for line, cause in expected_errors.items():
        row = by_line[line]
        assert row[schema.STATUS] == schema.STATUS_ERROR
        assert row[schema.ERROR].startswith(f"{manifest}, line {line}: ")
        assert cause in row[schema.ERROR], row[schema.ERROR]
        assert row[schema.TEXT] is None and row[schema.WORDS] is None
    assert by_line[6][schema.AUDIO_FILEPATH].endswith("/corrupt.wav") and "corrupt.wav" in by_line[6][schema.ERROR]
    ok = [r for r in table.to_pylist() if r[schema.STATUS] == schema.STATUS_OK]
    assert len(ok) == 8 and all(r[schema.ERROR] == "" and r[schema.TEXT] for r in ok)
    # the whole file's length reaches the output (listed as 9 s, each file decodes to its end: the two agree)
    assert all(r[schema.FILE_DURATION] == pytest.approx(r[schema.AUDIO_DURATION]) and 0 < r[schema.FILE_DURATION] < 9
               for r in ok)
    assert all(by_line[line][schema.FILE_DURATION] is None for line in expected_errors)
    busy = {name: 0 for name in schema.BUSY_S_BY_STAGE.values()}  # test_busy_seconds.py checks them
    assert summary.to_pylist()[0] | busy | {schema.COMMITTED_AT: 0} == {
        schema.PART: sink.list_parts(str(tmp_path / "out"))[0].rsplit("/", 1)[-1], schema.ROWS: 15,
        schema.ROWS_OK: 8, schema.ROWS_ERROR: 7, schema.AUDIO_S: pytest.approx(
            sum(len(w) for w in audio.column(schema.SAMPLES).to_pylist()) / 16000),
        schema.PADDED_S: summary.column(schema.PADDED_S)[0].as_py(), **busy, schema.COMMITTED_AT: 0}


@pytest.mark.parametrize("strategy", ["greedy", "ctc_greedy", "alsd"])
def test_good_rows_equal_decoding_each_utterance_in_process(rows, model_config, nemo_assets, strategy, tmp_path):
    decoding = DecodingConfig(strategy=strategy, beam_size=2)
    run_stages(rows, model_config, decoding, tmp_path / "out")
    table = sink.read_output(str(tmp_path / "out"))
    model = LOAD(model_config, "cpu")
    results = {r[schema.AUDIO_FILEPATH]: r for r in table.to_pylist() if r[schema.STATUS] == schema.STATUS_OK}
    assert len(results) == 8
    head = "ctc" if strategy == "ctc_greedy" else "transducer"
    for path, waveform in zip(nemo_assets["files"], nemo_assets["waveforms"]):
        row = results[str(path)]
        if strategy == "alsd":
            alsd = plan(model_config, decoding)
            audio, lengths = pad_waveforms([waveform])
            h = alsd.build_decoder(model)(*model.encode(audio, lengths)).to_list()[0]
            expected = transcript_of(model, alsd.span_kind, h.tokens, h.frame_indices, h.durations, h.score)
        else:
            expected = recognize(model, [waveform], head=head)[0]
        assert row[schema.TEXT] == expected.text
        assert [(w["word"], w["start"], w["end"]) for w in row[schema.WORDS]] == [
            (w.text, w.start_s, w.end_s) for w in expected.words]
        assert row[schema.DECODING] == describe(decoding) and row[schema.MODEL] == "test-model"


@pytest.mark.parametrize(("strategy", "aggregation"), [("greedy", "min"), ("ctc_greedy", "mean"), ("alsd", "mean")])
def test_confidence_fills_words_and_the_utterance_column_as_in_process(rows, model_config, nemo_assets, strategy,
                                                                       aggregation, tmp_path):
    """Word confidence = the aggregate of its tokens' confidences from the decoder (NeMo's measures, checked
    against NeMo in tests/decoders/test_confidence_nemo.py); the utterance's = the aggregate of its words'."""
    decoding = DecodingConfig(strategy=strategy, confidence=True, confidence_aggregation=aggregation)
    run_stages(rows, model_config, decoding, tmp_path / "out")
    table = sink.read_output(str(tmp_path / "out")).to_pylist()
    model = LOAD(model_config, "cpu")
    in_process = plan(model_config, decoding)
    decode = in_process.build_decoder(model)
    by_path = {r[schema.AUDIO_FILEPATH]: r for r in table if r[schema.STATUS] == schema.STATUS_OK}
    for path, waveform in zip(nemo_assets["files"], nemo_assets["waveforms"]):
        row = by_path[str(path)]
        audio, lengths = pad_waveforms([waveform])
        h = decode(*model.encode(audio, lengths)).to_list()[0]
        assert h.confidence is not None and len(h.confidence) == len(h.tokens)
        expected = transcript_of(model, in_process.span_kind, h.tokens, h.frame_indices, h.durations, h.score,
                                 h.confidence, aggregation)
        got = [w["confidence"] for w in row[schema.WORDS]]
        assert got == pytest.approx(expected.word_confidence, abs=1e-6)  # float32 in Parquet
        assert all(0.0 <= c <= 1.0 for c in got)
        reduce = {"min": min, "mean": lambda v: sum(v) / len(v)}[aggregation]
        by_hand = [reduce(h.confidence[w.pieces[0]: w.pieces[1] + 1]) for w in expected.words]  # each word's pieces
        assert got == pytest.approx(by_hand, abs=1e-6)
        assert row[schema.CONFIDENCE] == pytest.approx(reduce(expected.word_confidence)) if got else (
            row[schema.CONFIDENCE] is None)
        assert "confidence=tsallis-exp-0.33-" + aggregation in row[schema.DECODING]
    errors = [r for r in table if r[schema.STATUS] == schema.STATUS_ERROR]
    assert errors and all(r[schema.CONFIDENCE] is None for r in errors)


def test_calibrated_word_confidence_is_the_map_applied_to_the_uncalibrated(rows, model_config, tmp_path):
    """With `confidence_calibration`, words carry the map applied to the confidences they carry without it, and
    the utterance the aggregate (here mean) of its calibrated words; a map for another measure stops the stage."""
    from pipeline.decoding.calibration import Calibration, CalibrationMismatch, measure_of
    from pipeline.io.fetch import file_sha256

    raw = DecodingConfig(confidence=True, confidence_aggregation="mean")
    calibration = Calibration("isotonic", file_sha256(model_config.uri), measure_of(plan(model_config, raw)),
                              x=(0.0, 0.2, 0.6, 1.0), y=(0.05, 0.1, 0.7, 0.9))
    calibration.save(str(tmp_path / "calibration.json"))
    calibrated = DecodingConfig(confidence=True, confidence_aggregation="mean",
                                confidence_calibration=str(tmp_path / "calibration.json"))
    audio = LoadAudio(sample_rate=16000)(rows)
    decoded = TranscribeBatch(model_config, plan(model_config, raw), SMALL_BUCKETS, load=LOAD)(audio)
    for name, decoding in (("raw", raw), ("calibrated", calibrated)):
        FinishAndWrite(model_config, plan(model_config, decoding), str(tmp_path / name), "m")(decoded)
    before, after = ({r[schema.UTTERANCE_ID]: r for r in sink.read_output(str(tmp_path / name)).to_pylist()}
                     for name in ("raw", "calibrated"))
    checked = 0
    for key, row in after.items():
        if row[schema.STATUS] != schema.STATUS_OK or not row[schema.WORDS]:
            continue
        uncalibrated = np.array([w["confidence"] for w in before[key][schema.WORDS]])
        got = [w["confidence"] for w in row[schema.WORDS]]
        assert got == pytest.approx(calibration.apply(uncalibrated).tolist(), abs=1e-6)  # float32 in Parquet
        assert got != pytest.approx(uncalibrated.tolist(), abs=1e-3)
        assert row[schema.CONFIDENCE] == pytest.approx(np.mean(got), abs=1e-6)
        checked += len(got)
    assert checked > 0

    other = Calibration("isotonic", None, "ctc confidence=tsallis-exp-0.33-mean", x=(0.0,), y=(0.5,))
    other.save(str(tmp_path / "other.json"))
    wrong = DecodingConfig(confidence=True, confidence_aggregation="mean",
                           confidence_calibration=str(tmp_path / "other.json"))
    with pytest.raises(CalibrationMismatch, match="fitted for 'ctc confidence=tsallis-exp-0.33-mean'"):
        FinishAndWrite(model_config, plan(model_config, wrong), str(tmp_path / "wrong"), "m")(decoded)


def test_without_confidence_the_columns_are_null(rows, model_config, tmp_path):
    run_stages(rows, model_config, DecodingConfig(), tmp_path / "out")
    for row in sink.read_output(str(tmp_path / "out")).to_pylist():
        assert row[schema.CONFIDENCE] is None
        assert all(w["confidence"] is None for w in row[schema.WORDS] or [])


def ctc_beam_in_process(rows, model_config, nemo_assets, tmp_path, decoding):
    """Runs the stages with `decoding` (a ctc_beam), then searches each file in process as the writer does; yields
    (the stages' row, the model, the plan, the file's encoder output [1, T, D], its compact log-probs, the
    in-process hypothesis)."""
    run_stages(rows, model_config, decoding, tmp_path / "out")
    results = {r[schema.AUDIO_FILEPATH]: r for r in sink.read_output(str(tmp_path / "out")).to_pylist()}
    model = LOAD(model_config, "cpu")
    ctc_beam = plan(model_config, decoding)
    search = ctc_beam.build_writer_search(model)
    for path, waveform in zip(nemo_assets["files"], nemo_assets["waveforms"]):
        audio, lengths = pad_waveforms([waveform])
        encoder_output, encoder_lengths = model.encode(audio, lengths)
        compact = compact_ctc_log_probs(model, encoder_output, encoder_lengths, ctc_beam)
        (h,) = search(compact)
        yield results[str(path)], model, ctc_beam, encoder_output, compact[0], h


def test_ctc_beam_runs_on_compact_log_probs_like_in_process(rows, model_config, nemo_assets, tmp_path):
    decoding = DecodingConfig(strategy="ctc_beam", beam_size=4, ctc_collapse_threshold="weak")
    collapsed_frames = 0
    for row, model, _, encoder_output, (_, frames), h in ctc_beam_in_process(rows, model_config, nemo_assets,
                                                                              tmp_path, decoding):
        collapsed_frames += encoder_output.shape[1] - len(frames)
        expected = transcript_of(model, "ctc", h.tokens, h.frame_indices, None, h.score)
        assert row[schema.TEXT] == expected.text
        assert [(w["word"], w["start"], w["end"]) for w in row[schema.WORDS]] == [
            (w.text, w.start_s, w.end_s) for w in expected.words]
    assert collapsed_frames > 0  # the collapse did drop frames, and timestamps still came out in original frames


@pytest.mark.parametrize("strategy", ["greedy", "ctc_beam"])
def test_head_agreement_writes_the_other_heads_greedy_text_and_the_agreement(rows, model_config, nemo_assets,
                                                                              strategy, tmp_path):
    """With decoding.head_agreement, each ok row holds the other head's greedy text as in-process greedy of that head
    gives it, and 1 - WER between the two texts; error rows and runs without it hold nulls."""
    import jiwer

    decoding = DecodingConfig(strategy=strategy, head_agreement=True)
    run_stages(rows, model_config, decoding, tmp_path / "out")
    table = sink.read_output(str(tmp_path / "out")).to_pylist()
    model = LOAD(model_config, "cpu")
    results = {r[schema.AUDIO_FILEPATH]: r for r in table if r[schema.STATUS] == schema.STATUS_OK}
    assert len(results) == 8
    other = "ctc" if strategy == "greedy" else "transducer"
    agreements = []
    for path, waveform in zip(nemo_assets["files"], nemo_assets["waveforms"]):
        row = results[str(path)]
        assert row[schema.SECOND_HEAD_TEXT] == recognize(model, [waveform], head=other)[0].text
        expected = 1.0 - jiwer.wer(row[schema.TEXT], row[schema.SECOND_HEAD_TEXT]) if row[schema.TEXT] else None
        assert row[schema.HEAD_AGREEMENT] == pytest.approx(max(0.0, expected)), (row[schema.TEXT],
                                                                                  row[schema.SECOND_HEAD_TEXT])
        assert "head_agreement" in row[schema.DECODING]
        agreements.append(row[schema.HEAD_AGREEMENT])
    assert all(0.0 <= a <= 1.0 for a in agreements)
    assert all(r[schema.HEAD_AGREEMENT] is None and r[schema.SECOND_HEAD_TEXT] is None
               for r in table if r[schema.STATUS] == schema.STATUS_ERROR)
    with pytest.raises(DecodingError, match="hybrid"):
        plan_decoding(read_model_facts(str(nemo_assets["checkpoints"]["ctc"])), decoding)


def test_head_agreement_is_one_minus_the_word_error_rate_floored_at_zero():
    from pipeline.decoding.recognize import head_agreement

    assert head_agreement("call rachel green now", "call rachel green now") == 1.0
    assert head_agreement("call rachel green now", "call rachel grin now") == 0.75
    assert head_agreement("call rachel", "call rachel green now") == 0.0  # two insertions in two words
    assert head_agreement("a b c d", "a b c") == 0.75
    assert head_agreement("", "") == 1.0 and head_agreement("", "x") == 0.0 and head_agreement("x", "") == 0.0
    # a cased, punctuated head against a plain one: case, punctuation and digits are no disagreement
    assert head_agreement("Call Rachel at 5, please.", "call rachel at five please") == 1.0


def test_ctc_beam_confidence_measures_each_tokens_emission_frame(rows, model_config, nemo_assets, tmp_path):
    """ctc_beam with confidence: a token's confidence is the measure of the CTC distribution on the frame that emits
    it (the compact float16 copy the writer searches), words and utterance aggregated as for greedy."""
    from decoders.confidence import token_confidence

    decoding = DecodingConfig(strategy="ctc_beam", beam_size=4, confidence=True, confidence_aggregation="mean")
    measured = 0
    for row, model, ctc_beam, encoder_output, _, h in ctc_beam_in_process(rows, model_config, nemo_assets, tmp_path,
                                                                           decoding):
        full = model.ctc.log_probs(encoder_output)[0]  # every frame, float32: the frames the tokens stand at
        expected = token_confidence(full[h.frame_indices], ctc_beam.confidence).tolist() if h.tokens else []
        assert h.confidence == pytest.approx(expected, abs=5e-3)  # the search reads float16 log-probs
        words = transcript_of(model, "ctc", h.tokens, h.frame_indices, None, h.score, h.confidence, "mean")
        assert [w["confidence"] for w in row[schema.WORDS]] == pytest.approx(words.word_confidence, abs=1e-6)
        measured += len(h.tokens)
    assert measured > 0
    with pytest.raises(DecodingError, match="emits it"):
        plan(model_config, DecodingConfig(strategy="ctc_beam", confidence=True, confidence_exclude_blank=False))


def test_a_failing_bucket_is_retried_row_by_row(rows, model_config):
    audio = LoadAudio(sample_rate=16000)(rows)
    stage = TranscribeBatch(model_config, plan(model_config), ResourcesConfig(batch_audio_s=1000),
                                   load=LOAD)
    poisoned = len(audio.column(schema.SAMPLES)[0].as_py())
    original = stage._run

    def run(waveforms, sets):  # one utterance (the first row's) breaks any batch it is in
        if any(len(w) == poisoned for w in waveforms):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return original(waveforms, sets)

    stage._run = run
    decoded = stage(audio)
    statuses = decoded.column(schema.STATUS).to_pylist()
    assert statuses[0] == schema.STATUS_ERROR and "decoding failed (RuntimeError: CUDA error" in \
        decoded.column(schema.ERROR)[0].as_py()
    assert statuses.count(schema.STATUS_OK) == 7  # the other good rows of the same bucket still decoded
    assert all(t is not None for t, s in zip(decoded.column(schema.TOKENS).to_pylist(), statuses) if s == "ok")


def test_read_manifests_skips_committed_rows(rows, tmp_path):
    manifest = rows.column(schema.MANIFEST)[0].as_py()
    done = rows.slice(0, 5)
    sink.write_part(str(tmp_path), sink.to_output_table(done))
    reader = ReadManifests(sink.committed_ids(str(tmp_path)), chunk_rows=4)
    chunks = list(reader(pa.table({schema.MANIFEST: [manifest]})))
    assert [c.num_rows for c in chunks] == [4, 4, 2]  # small tables, so later stages work in small blocks
    remaining = pa.concat_tables(chunks)
    assert remaining.column(schema.UTTERANCE_ID).to_pylist() == rows.column(schema.UTTERANCE_ID).to_pylist()[5:]


def test_padding_efficiency_is_reported_per_row(rows, model_config):
    audio = LoadAudio(sample_rate=16000)(rows)
    decoded = TranscribeBatch(model_config, plan(model_config), ResourcesConfig(batch_audio_s=1000),
                                     load=LOAD)(audio)
    audio_s = np.array(decoded.column(schema.AUDIO_S).to_pylist())
    padded = np.array(decoded.column(schema.PADDED_S).to_pylist())
    ok = np.array(decoded.column(schema.STATUS).to_pylist()) == schema.STATUS_OK
    # one bucket: every row's share is the longest utterance
    assert padded[ok] == pytest.approx(np.full(ok.sum(), audio_s[ok].max()))
    assert (padded[~ok] == 0).all()


@pytest.mark.parametrize(("kind", "strategy", "message"), [
    ("ctc", "alsd", "needs a transducer head"),
    ("rnnt", "ctc_beam", "needs a CTC head"),
    ("tdt_ctc", "wind_beam", "RNN-T only"),
])
def test_strategies_a_model_cannot_run_are_refused_on_the_driver(nemo_assets, kind, strategy, message):
    from pipeline.config import TranscribeJobConfig
    from pipeline.graph import JobError, plan_job_decoding

    path = nemo_assets["checkpoints"][kind]
    facts = read_model_facts(path)
    config = TranscribeJobConfig(model=ModelConfig(uri=str(path)), decoding=DecodingConfig(strategy=strategy))
    with pytest.raises(JobError, match=message):
        plan_job_decoding(facts, config, "cpu")
    plan_job_decoding(facts, TranscribeJobConfig(model=ModelConfig(uri=str(path))), "cpu")  # greedy fits


@pytest.mark.parametrize("strategy", ["greedy", "ctc_beam"])
def test_the_lm_is_fetched_once_and_fused_as_in_process(nemo_assets, rows, model_config, tmp_path, strategy):
    from pipeline.decoding.fusion import load_language_model
    from pipeline.decoding.plan import decode_in_process
    from pipeline.lm.build import build_lm

    tokenizer_dir = nemo_assets["checkpoints"]["tdt_ctc"].parent / "tokenizer"
    lm_path = tmp_path / "domain.lm"
    build_lm([tokenizer_dir / "text.txt"], tokenizer_dir / "tokenizer.model", lm_path, order=3, tool="varikn")
    decoding = DecodingConfig(strategy=strategy, lm_uri=str(lm_path), lm_weight=0.8, ctc_collapse_threshold="weak")
    run_stages(rows, model_config, decoding, tmp_path / "out")
    results = {r[schema.AUDIO_FILEPATH]: r for r in sink.read_output(str(tmp_path / "out")).to_pylist()}
    model = LOAD(model_config, "cpu")
    vocab = model.ctc.vocab_size if strategy == "ctc_beam" else model.transducer.vocab_size
    lm = load_language_model(plan(model_config, decoding), vocab, str(tmp_path / "cache"))
    plain = DecodingConfig(strategy=strategy, ctc_collapse_threshold="weak")
    changed = 0
    for path, waveform in zip(nemo_assets["files"], nemo_assets["waveforms"]):
        audio, lengths = pad_waveforms([waveform])
        encoder_output, encoder_lengths = model.encode(audio, lengths)
        texts = []
        for config in (decoding, plain):  # the stages' output must equal decoding in one process
            in_process = plan(model_config, config)
            h = decode_in_process(model, in_process, lm)(encoder_output, encoder_lengths)[0]
            texts.append(transcript_of(model, in_process.span_kind, h.tokens, h.frame_indices, h.durations,
                                       h.score).text)
        assert results[str(path)][schema.TEXT] == texts[0]
        changed += texts[0] != texts[1]
        assert "lm_weight=0.8" in results[str(path)][schema.DECODING]
    assert changed > 0  # the LM did change some transcripts


def test_each_stage_worker_imports_only_what_its_stage_needs():
    """A Ray worker imports the module of its stage's class: the reading stages must not pull in torch (every CPU
    actor would pay its start-up and memory) and the writer must not pull in NeMo (only the ASR stage loads it)."""
    import subprocess
    import sys

    script = ("import sys\n"
              "import pipeline.stages.read, pipeline.stages.audio, pipeline.stages.shards\n"
              "print('torch' in sys.modules, 'nemo' in sys.modules)\n"
              "import pipeline.stages.write\n"
              "print('nemo' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=str(Path(__file__).resolve().parents[3]))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "False"]
