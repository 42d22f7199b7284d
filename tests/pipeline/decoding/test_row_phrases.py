"""Per-utterance phrase lists in the pipeline (`pipeline/decoding/row_phrases.py`).

- The manifest's `phrases` (a NeMo line's key, a Lhotse cut's `custom`) is read into the `phrases` column; a bad
  value is an error row naming the manifest, the line, the item and the cause.
- The plan's one decision: rows' lists are boosted at `--boost-weight` (default 0.5); 0 switches them off.
- The stages, on the bundled model and bundled domain samples, for every strategy: a row listing phrases decodes
  as it decodes alone in a job whose `--phrases` is its own list (the job-wide loader builds that tree, not the
  per-row code); a row listing none exactly as with the rows' lists off (bit for bit: same tokens and frames);
  a name comes out only for the rows that list it; a phrase the tokenizer cannot write is an error row; every
  chunk of a long row carries its row's phrases; with an n-gram LM and with a job-wide list too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline import schema
from pipeline.config import BUNDLED_MODEL, LongAudioConfig, ModelConfig, ResourcesConfig
from pipeline.decoding.plan import DecodingConfig, plan_decoding
from pipeline.io import sink
from pipeline.io.manifest import MAX_ROW_PHRASES, parse_line, read_manifest
from pipeline.model.actor import load_model
from pipeline.model.nemo_file import ModelFacts
from pipeline.stages.asr import TranscribeBatch
from pipeline.stages.audio import LoadAudio
from pipeline.stages.write import FinishAndWrite

DOMAIN = BUNDLED_MODEL.parent.parent / "samples" / "domain"


def line(**values) -> str:
    return json.dumps({"audio_filepath": "a.wav", "duration": 1.0, **values})


# --- the manifest ------------------------------------------------------------------------------------------------
def test_phrases_are_read_from_nemo_lines_and_lhotse_cuts():
    row = parse_line(line(phrases=["anna  boyle", "jeff fox\t2.5", ["sara holden", 3]]), "m.json", 1)
    assert row[schema.STATUS] == schema.STATUS_OK
    assert row[schema.PHRASES] == [{"text": "anna boyle", "weight": None}, {"text": "jeff fox", "weight": 2.5},
                                   {"text": "sara holden", "weight": 3.0}]
    assert json.loads(row[schema.EXTRA]) == {"phrases": ["anna  boyle", "jeff fox\t2.5", ["sara holden", 3]]}
    for empty in (None, []):
        assert parse_line(line(phrases=empty), "m.json", 1)[schema.PHRASES] is None
    assert parse_line(line(), "m.json", 1)[schema.PHRASES] is None
    cut = {"id": "c1", "start": 0.0, "duration": 1.0, "supervisions": [], "custom": {"phrases": ["rachel perkins"]},
           "recording": {"id": "r", "sources": [{"type": "file", "source": "a.wav", "channels": [0]}]}}
    assert parse_line(json.dumps(cut), "m.json", 1)[schema.PHRASES] == [{"text": "rachel perkins", "weight": None}]
    rows = [parse_line(line(phrases=["a"]), "m.json", 1), parse_line(line(), "m.json", 2)]
    assert pa.Table.from_pylist(rows, schema=schema.INPUT_SCHEMA).column(schema.PHRASES).to_pylist()[1] is None


@pytest.mark.parametrize(("phrases", "cause"), [
    ("anna boyle", "'phrases' must be a list of phrases (strings, or [phrase, weight] pairs), got 'anna boyle'"),
    ({"anna": 1}, "'phrases' must be a list"),
    (["anna boyle", ""], "'phrases' item 2: empty phrase"),
    (["anna boyle", "  \t2"], "'phrases' item 2: empty phrase"),
    (["anna boyle\tlots"], "'phrases' item 1: the weight after the tab must be a number > 0, got 'lots'"),
    (["anna boyle\t-1"], "'phrases' item 1: the weight after the tab must be a number > 0"),
    ([["anna boyle", 0]], "'phrases' item 1: the weight must be a number > 0, got 0"),
    ([["anna boyle", "2"]], "'phrases' item 1: the weight must be a number > 0, got '2'"),
    ([["anna boyle", True]], "'phrases' item 1: the weight must be a number > 0, got True"),
    ([["anna boyle", 1.0, 2.0]], "'phrases' item 1 must be a string or a [phrase, weight] pair"),
    ([7], "'phrases' item 1 must be a string or a [phrase, weight] pair, got 7"),
    (["x" * 1001], "'phrases' item 1: a phrase of 1001 characters, more than 1000"),
    (["a"] * (MAX_ROW_PHRASES + 1), f"more than the {MAX_ROW_PHRASES} a row may"),
])
def test_bad_phrases_are_error_rows_naming_the_manifest_line_and_item(tmp_path, phrases, cause):
    manifest = tmp_path / "m.json"
    manifest.write_text(line(audio_filepath="a.wav") + "\n" + line(audio_filepath="b.wav", phrases=phrases) + "\n")
    good, bad = read_manifest(str(manifest))
    assert good[schema.STATUS] == schema.STATUS_OK
    assert bad[schema.STATUS] == schema.STATUS_ERROR and bad[schema.PHRASES] is None
    assert bad[schema.ERROR].startswith(f"{manifest}, line 2: ") and cause in bad[schema.ERROR], bad[schema.ERROR]


def test_a_bad_list_in_a_cuts_custom_names_the_cut():
    cut = {"id": "c1", "duration": 1.0, "supervisions": [], "custom": {"phrases": [["x", -2]]},
           "recording": {"id": "r", "sources": [{"type": "file", "source": "a.wav", "channels": [0]}]}}
    row = parse_line(json.dumps(cut), "m.json", 4)
    assert row[schema.ERROR] == "m.json, line 4: cut 'c1': 'custom.phrases' item 1: the weight must be a number > 0, " \
                                "got -2"


# --- the plan ------------------------------------------------------------------------------------------------------
def test_rows_lists_are_boosted_at_the_boost_weight_and_zero_switches_them_off():
    facts = ModelFacts(kind="hybrid_rnnt_ctc", durations=(), sample_rate=16000, max_symbols=10)
    plan = plan_decoding(facts, DecodingConfig())
    assert plan.boosts_rows and not plan.boosts and plan.row_boost_weight == 0.5 and plan.fusion_weight == 0
    rows = plan.with_row_phrases()
    assert rows.boosts and rows.fusion_weight == 0.5 and not rows.use_cuda_graphs
    assert plan.row_description(3) == "greedy row_phrases=3 boost_weight=0.5"
    off = plan_decoding(facts, DecodingConfig(boost_weight=0.0))
    assert not off.boosts_rows
    both = plan_decoding(facts, DecodingConfig(phrases_uri="names.txt", boost_weight=0.7, lm_uri="x.lm",
                                               lm_weight=0.3))
    assert both.with_row_phrases().fusion_weight == pytest.approx(1.0)
    assert both.row_description(2) == "greedy lm=x.lm lm_weight=0.3 phrases=names.txt boost_weight=0.7 row_phrases=2"
    with pytest.raises(ValueError, match="boost_weight must be a (finite )?number >= 0"):
        DecodingConfig(boost_weight=-0.5)


# --- the stages, on the bundled model ------------------------------------------------------------------------
ROWS = [  # (audio, id, phrases): the domain's dev utterances, some listing phrases, some the same audio without
    ("dev107", None, ["luis phillips", "anna boyle"]),  # "call luis phillips": the model writes "luice filips"
    ("dev107", "dev107-plain", None),
    ("dev133", None, [["heather lucero", 2.0]]),  # "... from heather lucero for dinner"
    ("dev100", None, ["rachel perkins\t1.5"]),  # "pay rachel perkins ..."
    ("dev100", "dev100-plain", None),
    ("dev109", None, ["anna boyle", "luis phillips"]),  # dev107's set, in another order: the same tree
    ("dev101", None, None),
    ("dev102", None, ["зоя"]),  # a phrase the tokenizer cannot write: an error row
    ("dev104", None, None),
]
BAD = "dev102"


@pytest.fixture(scope="module")
def domain_table(tmp_path_factory):
    manifest = tmp_path_factory.mktemp("row-phrases") / "m.json"
    lines = {Path(r["audio_filepath"]).stem: r for r in map(json.loads, (DOMAIN / "dev.json").read_text().splitlines())}
    with open(manifest, "w") as handle:
        for stem, given_id, phrases in ROWS:
            entry = dict(lines[stem], audio_filepath=str(DOMAIN / lines[stem]["audio_filepath"]))
            entry.update({"id": given_id} if given_id else {})
            entry.update({"phrases": phrases} if phrases else {})
            handle.write(json.dumps(entry) + "\n")
    return pa.Table.from_pylist(list(read_manifest(str(manifest))), schema=schema.INPUT_SCHEMA)


def without_phrases(table: pa.Table) -> pa.Table:
    """The same rows as a job without per-utterance lists reads them."""
    index = table.schema.get_field_index(schema.PHRASES)
    return table.set_column(index, schema.PHRASES, pa.nulls(table.num_rows, table.schema.field(index).type))


def key(row) -> str:
    return row[schema.SOURCE_ID] or Path(row[schema.AUDIO_FILEPATH]).stem


_MODELS = {}


def load(model_config, device):
    if model_config.uri not in _MODELS:
        _MODELS[model_config.uri] = load_model(model_config, device)
    return _MODELS[model_config.uri]


def run(table, decoding, output, long_audio=None):
    """The ASR and writer stages -> {row key: (output row, the ASR stage's row)}."""
    model_config = ModelConfig(uri=str(BUNDLED_MODEL), cache_dir=str(output.parent / "cache"))
    plan = plan_decoding(load(model_config, "cpu").facts, decoding)
    resources = ResourcesConfig(device="cpu", batch_audio_s=30.0)  # several rows a batch, a few batches
    audio = LoadAudio(16000, long_audio=long_audio)(table)
    transcribe = TranscribeBatch(model_config, plan, resources, long_audio=long_audio, load=load)
    decoded = transcribe(audio)
    FinishAndWrite(model_config, plan, str(output), "bundled")(decoded)
    asr_rows = {key(r): r for r in decoded.to_pylist()}
    return {key(r): (r, asr_rows[key(r)]) for r in sink.read_output(str(output)).to_pylist()}, transcribe


def in_process_with_own_list(stem: str, phrases, decoding: DecodingConfig, tmp_path: Path) -> str:
    """The text of one utterance decoded alone, in a job whose `--phrases` file is the row's list."""
    import soundfile

    from pipeline.decoding.fusion import load_fusion_model
    from pipeline.decoding.plan import decode_in_process
    from pipeline.decoding.recognize import pad_waveforms, transcript_of

    model = load(ModelConfig(uri=str(BUNDLED_MODEL)), "cpu")
    path = tmp_path / f"{stem}.txt"
    path.write_text("".join((p if isinstance(p, str) else f"{p[0]}\t{p[1]}") + "\n" for p in phrases))
    config = DecodingConfig(**{**decoding.__dict__, "phrases_uri": str(path)})
    plan = plan_decoding(model.facts, config)
    decode = decode_in_process(model, plan, load_fusion_model(plan, model, str(tmp_path / "cache")))
    waveform = soundfile.read(DOMAIN / "audio" / f"{stem}.flac", dtype="float32")[0]
    h = decode(*model.encode(*pad_waveforms([waveform])))[0]
    return transcript_of(model, plan.span_kind, h.tokens, h.frame_indices, h.durations, h.score).text


# every strategy at the default weight; the transducer beam searches at a large one too, where a decoder's fusion
# weight changes the blank scores of rows that list nothing (weighted blank scoring), had they been decoded with the
# rows that do
CASES = [(strategy, 0.5) for strategy in ("greedy", "wind_greedy", "alsd", "aes", "wind_beam", "ctc_greedy",
                                          "ctc_beam")] + [("alsd", 3.0), ("aes", 3.0)]


@pytest.mark.nemo
@pytest.mark.parametrize(("strategy", "weight"), CASES)
def test_each_row_decodes_with_its_own_phrases_and_the_others_as_without(domain_table, tmp_path, strategy, weight):
    decoding = DecodingConfig(strategy=strategy, beam_size=4, boost_weight=weight)
    boosted, _ = run(domain_table, decoding, tmp_path / "boosted")
    plain, _ = run(without_phrases(domain_table), decoding, tmp_path / "plain")
    assert set(boosted) == set(plain) == {given or stem for stem, given, _ in ROWS}
    for stem, given_id, phrases in ROWS:
        name = given_id or stem
        row, asr_row = boosted[name]
        if name == BAD:
            assert row[schema.STATUS] == schema.STATUS_ERROR
            assert row[schema.ERROR].startswith(f"{row[schema.MANIFEST]}, line {row[schema.LINE]}: 'phrases': 'зоя' "
                                                "holds characters the model's tokenizer cannot encode")
            continue
        assert row[schema.STATUS] == schema.STATUS_OK, row[schema.ERROR]
        if phrases is None:  # exactly as in a job without rows' lists: same tokens, frames, words
            assert row[schema.DECODING] == plain[name][0][schema.DECODING]
            assert (row[schema.TEXT], row[schema.WORDS]) == (plain[name][0][schema.TEXT], plain[name][0][schema.WORDS])
            if strategy != "ctc_beam":
                assert (asr_row[schema.TOKENS], asr_row[schema.TOKEN_FRAMES]) == (
                    plain[name][1][schema.TOKENS], plain[name][1][schema.TOKEN_FRAMES])
        else:
            assert row[schema.DECODING].endswith(f" row_phrases={len(phrases)} boost_weight={weight:g}")
            assert row[schema.TEXT] == in_process_with_own_list(stem, phrases, decoding, tmp_path), name
    # the same audio listing phrases and not: boosted, and not (CTC greedy at 0.5 comes close: "luis pillips")
    assert boosted["dev107"][0][schema.TEXT] != boosted["dev107-plain"][0][schema.TEXT]
    assert ("luis phillips" in boosted["dev107"][0][schema.TEXT]) == (strategy != "ctc_greedy")
    assert "luis phillips" not in boosted["dev107-plain"][0][schema.TEXT]
    assert "rachel perkins" not in boosted["dev100-plain"][0][schema.TEXT]


@pytest.mark.nemo
def test_a_job_list_and_an_lm_are_fused_with_the_rows_own(domain_table, tmp_path):
    """With `--lm` and `--phrases`: a row listing phrases gets the job's list and its own, summed, and the LM; a row
    listing none decodes exactly as the job's decoder does without rows' lists."""
    import torch

    from decoders.boosting.tree import WeightedSum
    from pipeline.decoding.fusion import boosting_from_phrase_file, load_language_model, sentencepiece_of
    from pipeline.decoding.plan import decode_in_process
    from pipeline.decoding.recognize import pad_waveforms
    from pipeline.lm.build import build_lm

    lm_path = tmp_path / "domain.lm"
    build_lm([DOMAIN / "lm_text.txt"], BUNDLED_MODEL, lm_path, order=3, tool="varikn")
    job_list = tmp_path / "job.txt"
    job_list.write_text("sara holden\nheather lucero\n")
    decoding = DecodingConfig(strategy="alsd", beam_size=4, lm_uri=str(lm_path), lm_weight=0.5,
                              phrases_uri=str(job_list), boost_weight=0.5)
    boosted, _ = run(domain_table, decoding, tmp_path / "boosted")
    plain, _ = run(without_phrases(domain_table), decoding, tmp_path / "plain")
    model = load(ModelConfig(uri=str(BUNDLED_MODEL)), "cpu")
    plan = plan_decoding(model.facts, decoding)
    vocab = model.transducer.vocab_size
    lm = load_language_model(plan, vocab, str(tmp_path / "cache"))
    job = boosting_from_phrase_file(str(job_list), sentencepiece_of(model), vocab)
    import soundfile

    for stem, given_id, phrases in ROWS:
        name = given_id or stem
        row = boosted[name][0]
        if phrases is None:
            assert row[schema.TEXT] == plain[name][0][schema.TEXT]
            continue
        if name == BAD:
            continue
        own_list = tmp_path / f"{stem}.txt"
        own_list.write_text("".join((p if isinstance(p, str) else f"{p[0]}\t{p[1]}") + "\n" for p in phrases))
        own = boosting_from_phrase_file(str(own_list), sentencepiece_of(model), vocab)
        rows_plan = plan.with_row_phrases()
        decode = decode_in_process(model, rows_plan, rows_plan.fusion_model(lm, WeightedSum(job, 1.0, own, 1.0)))
        waveform = soundfile.read(DOMAIN / "audio" / f"{stem}.flac", dtype="float32")[0]
        with torch.no_grad():
            h = decode(*model.encode(*pad_waveforms([waveform])))[0]
        assert row[schema.TEXT] == model.tokenizer.ids_to_text(h.tokens), name
        assert row[schema.DECODING].endswith(f"boost_weight=0.5 row_phrases={len(phrases)}")


@pytest.mark.nemo
def test_every_chunk_of_a_long_row_carries_its_rows_phrases(domain_table, tmp_path, monkeypatch):
    """Rows longer than `chunk_s` (2 s here) are cut into chunks; each chunk is decoded with its row's phrases."""
    seen: list[tuple] = []
    run_pieces = TranscribeBatch._run

    def recording(self, waveforms, sets):
        seen.extend(sets)
        return run_pieces(self, waveforms, sets)

    monkeypatch.setattr(TranscribeBatch, "_run", recording)
    rows, transcribe = run(domain_table, DecodingConfig(strategy="greedy"), tmp_path / "out",
                           long_audio=LongAudioConfig(chunk_s=2.0, overlap_s=0.5))
    lucero = (("heather lucero", 2.0),)
    assert seen.count(lucero) >= 2  # dev133 (4.2 s): every chunk with its row's set
    assert rows["dev133"][0][schema.STATUS] == schema.STATUS_OK
    assert seen.count(None) >= 4  # the rows without phrases, and their chunks: without
