"""`read_model_layout` reads from a `.nemo` file, without NeMo, what the loaded model says about itself.

Peers: the loaded NeMo model behind `AsrModel` (tokenizer, punctuation its decoding found, frame timing, head
layouts) for the random RNN-T, TDT + CTC and CTC models and the bundled demo model; and NeMo's own
`SentencePieceTokenizer` plus `extract_punctuation_from_vocab` for a tokenizer with punctuation pieces. The
writer stage built on it is checked in a fresh interpreter: same rows as in-process decoding, and NeMo never
imported.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml

from pipeline.decoding.recognize import transcript_of
from pipeline.model.nemo import load_asr_model
from pipeline.model.nemo_file import LayoutUnavailable, read_model_layout

pytestmark = pytest.mark.nemo

ROOT = Path(__file__).resolve().parents[3]
BUNDLED = ROOT / "models" / "demo_hybrid_rnnt_ctc.nemo"


def _checkpoints(nemo_assets) -> dict[str, Path]:
    return {**nemo_assets["checkpoints"], "bundled": BUNDLED}


@pytest.mark.parametrize("name", ["rnnt", "tdt_ctc", "ctc", "bundled"])
def test_layout_equals_the_loaded_model(nemo_assets, name):
    path = _checkpoints(nemo_assets)[name]
    model, layout = load_asr_model(str(path)), read_model_layout(path)
    assert (layout.kind, layout.heads, layout.sample_rate) == (model.kind, model.heads, model.sample_rate)
    assert layout.frame_shift_s == pytest.approx(model.frame_shift_s)
    for head in ("transducer", "ctc"):
        ours, theirs = getattr(layout, head), getattr(model, head)
        assert (ours is None) == (theirs is None)
        if ours is not None:
            assert (ours.vocab_size, ours.blank_id) == (theirs.vocab_size, theirs.blank_id)
    if model.transducer is not None:
        assert layout.transducer.durations == model.transducer.durations
    assert layout.tokenizer.vocab_size == model.tokenizer.vocab_size
    assert layout.tokenizer.punctuation == model.tokenizer.punctuation
    rng = np.random.default_rng(0)
    span_kind = "tdt" if model.transducer is not None and model.transducer.durations else (
        "rnnt" if model.transducer is not None else "ctc")
    for length in (0, 1, 5, 40):
        tokens = rng.integers(0, model.tokenizer.vocab_size, length).tolist()
        frames = np.sort(rng.integers(0, 200, length)).tolist()
        durations = rng.integers(0, 3, length).tolist() if span_kind == "tdt" else None
        assert transcript_of(layout, span_kind, tokens, frames, durations, -1.5) == transcript_of(
            model, span_kind, tokens, frames, durations, -1.5)


def test_punctuation_and_text_match_nemos_tokenizer(tmp_path):
    import sentencepiece
    from nemo.collections.asr.parts.utils.tokenizer_utils import extract_punctuation_from_vocab
    from nemo.collections.common.tokenizers.sentencepiece_tokenizer import SentencePieceTokenizer

    from pipeline.model.nemo_file import SentencePieceText

    text = tmp_path / "text.txt"
    text.write_text("\n".join(["Hello, world! Is it you?", "It's 5 o'clock; time-to-go.", "fine, <unk> fine"]
                              * 20) + "\n")
    sentencepiece.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "sp"), vocab_size=60,
                                             model_type="bpe", user_defined_symbols=[",", "?", "!", "[noise]"])
    nemo_tokenizer = SentencePieceTokenizer(str(tmp_path / "sp.model"))
    ours = SentencePieceText((tmp_path / "sp.model").read_bytes())
    assert ours.punctuation == extract_punctuation_from_vocab(nemo_tokenizer.vocab)
    assert {",", "?", "!"} <= ours.punctuation and "[" not in ours.punctuation
    ids = nemo_tokenizer.text_to_ids("Hello, world! It's time-to-go? [noise] zebra")
    assert ours.ids_to_pieces(ids) == nemo_tokenizer.ids_to_tokens(ids)
    assert ours.ids_to_text(ids) == nemo_tokenizer.ids_to_text(ids)
    assert ours.pieces_to_text(ours.ids_to_pieces(ids)) == nemo_tokenizer.tokens_to_text(
        nemo_tokenizer.ids_to_tokens(ids))


def _rewrite_config(source: Path, target: Path, change) -> Path:
    """A copy of a `.nemo` tar with `change(config)` applied to its model_config.yaml."""
    with tarfile.open(source) as archive, tarfile.open(target, "w") as out:
        for member in archive.getmembers():
            data = archive.extractfile(member).read() if member.isfile() else None
            if member.name.endswith("model_config.yaml"):
                config = yaml.safe_load(data)
                change(config)
                data = yaml.safe_dump(config).encode()
                member.size = len(data)
            out.addfile(member, io.BytesIO(data) if data is not None else None)
    return target


def test_other_tokenizers_and_encoders_are_refused_not_guessed(nemo_assets, tmp_path):
    source = nemo_assets["checkpoints"]["ctc"]
    wordpiece = _rewrite_config(source, tmp_path / "wpe.nemo", lambda c: c["tokenizer"].update(type="wpe"))
    with pytest.raises(LayoutUnavailable, match="tokenizer"):
        read_model_layout(wordpiece)
    no_factor = _rewrite_config(source, tmp_path / "citrinet.nemo", lambda c: c["encoder"].pop("subsampling_factor"))
    with pytest.raises(LayoutUnavailable, match="subsampling_factor"):
        read_model_layout(no_factor)


WRITER_SCRIPT = """
import json, sys
import pyarrow.feather
from pipeline.stages.write import FinishAndWrite
from pipeline.config import DecodingConfig, ModelConfig
from pipeline.decoding.plan import plan_decoding
from pipeline.model.nemo_file import read_model_facts
decoded = pyarrow.feather.read_table(sys.argv[1])
plan = plan_decoding(read_model_facts(sys.argv[2]), DecodingConfig(strategy=sys.argv[4]))
FinishAndWrite(ModelConfig(uri=sys.argv[2]), plan, sys.argv[3], "test-model")(decoded)
print(json.dumps({"nemo_imported": any(m == "nemo" or m.startswith("nemo.") for m in sys.modules)}))
"""


@pytest.mark.parametrize("strategy", ["greedy", "ctc_beam"])
def test_writer_stage_needs_no_nemo(nemo_assets, tmp_path, strategy):
    """The writer writes the same rows as with the loaded model, in an interpreter that never imports NeMo."""
    import pyarrow.feather

    from pipeline import schema
    from pipeline.config import DecodingConfig, ModelConfig, ResourcesConfig
    from pipeline.decoding.plan import plan_decoding
    from pipeline.io import sink
    from pipeline.io.manifest import read_manifest
    from pipeline.model.actor import load_model
    from pipeline.model.nemo_file import read_model_facts
    from pipeline.stages.asr import TranscribeBatch
    from pipeline.stages.audio import LoadAudio
    from pipeline.stages.write import FinishAndWrite

    manifest = tmp_path / "manifest.json"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(f), "duration": 9.0}) + "\n"
                                for f in nemo_assets["files"]))
    rows = pa.Table.from_pylist(list(read_manifest(str(manifest))), schema=schema.INPUT_SCHEMA)
    model, decoding = ModelConfig(uri=str(nemo_assets["checkpoints"]["tdt_ctc"])), DecodingConfig(strategy=strategy)
    plan = plan_decoding(read_model_facts(model.uri), decoding)
    audio = LoadAudio(sample_rate=16000)(rows)
    decoded = TranscribeBatch(model, plan, ResourcesConfig())(audio)
    FinishAndWrite(model, plan, str(tmp_path / "loaded"), "test-model", load=load_model)(decoded)
    pyarrow.feather.write_feather(decoded, tmp_path / "decoded.arrow")
    result = subprocess.run([sys.executable, "-c", WRITER_SCRIPT, str(tmp_path / "decoded.arrow"), model.uri,
                             str(tmp_path / "layout"), strategy], cwd=ROOT, capture_output=True, text=True,
                            check=True)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"nemo_imported": False}

    def rows_of(folder):
        table = sink.read_output(str(tmp_path / folder)).sort_by(schema.UTTERANCE_ID)
        return table.select([schema.UTTERANCE_ID, schema.STATUS, schema.TEXT, schema.WORDS]).to_pylist()

    expected = rows_of("loaded")
    assert len(expected) == 8 and all(r[schema.STATUS] == schema.STATUS_OK for r in expected)
    assert rows_of("layout") == expected
