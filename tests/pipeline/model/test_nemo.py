"""NeMo checkpoints through `load_asr_model` decode token-identically to NeMo, with NeMo's word timestamps.

Peers: small random NeMo models (RNN-T, TDT + CTC hybrid, CTC; 2 layers, d_model 128) with a SentencePiece
tokenizer trained here are calibrated to emit about one label per 3 frames, saved as `.nemo`, loaded back
through `load_asr_model` (from a local path and from a moto S3 bucket), and decoded by our greedy decoders and
by NeMo's `transcribe(..., timestamps=True)` with `greedy_batch` on the same WAV files (files, not arrays:
NeMo pads numpy input to 1 s).

NeMo runs at batch size 1 and ours in batches of 4, so the comparison also checks that padding changes
nothing. Batch size 1 is needed for NeMo's TDT timestamps: in a batch, NeMo 3.0's label-looping records for a
row that found its label at once the duration argmax of the last inner step taken for other rows, so its TDT
token durations (not its tokens) depend on the batch. NeMo also reports a lone "▁" as a word with empty
text, which we leave out.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from pipeline.model.nemo import load_asr_model
from tests.support.nemo_peer import assert_same_as_nemo, nemo_transcribe

pytestmark = pytest.mark.nemo


@pytest.fixture(scope="session")
def nemo_results(nemo_assets):
    """NeMo's own greedy_batch transcription of the files, per (kind, head), computed on first use."""
    cache: dict = {}

    def results(kind: str, head: str):
        if (kind, head) not in cache:
            cache[kind, head] = nemo_transcribe(nemo_assets["checkpoints"][kind], nemo_assets["files"], head)
        return cache[kind, head]

    return results


@pytest.mark.parametrize("kind, heads", [("rnnt", ["transducer"]), ("tdt_ctc", ["transducer", "ctc"]),
                                         ("ctc", ["ctc"])])
def test_local_checkpoint_decodes_like_nemo(nemo_assets, nemo_results, kind, heads):
    path = nemo_assets["checkpoints"][kind]
    model = load_asr_model(str(path), sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    assert model.kind == {"rnnt": "rnnt", "tdt_ctc": "hybrid_tdt_ctc", "ctc": "ctc"}[kind]
    assert list(model.heads) == heads
    assert model.sample_rate == 16000 and model.frame_shift_s == pytest.approx(0.08)
    if model.transducer is not None:
        assert model.transducer.blank_id == model.transducer.vocab_size == model.tokenizer.vocab_size
        assert model.transducer.durations == ((0, 1, 2, 3, 4) if kind == "tdt_ctc" else ())
    waveforms = nemo_assets["waveforms"]
    frames = sum(int(model.encode(*_one(w))[1]) for w in waveforms)
    for head in heads:
        transcripts = assert_same_as_nemo(model, waveforms, nemo_results(kind, head), head)
        emitted = sum(len(t.tokens) for t in transcripts)
        assert 0.1 < emitted / frames < 1.0, f"{kind} {head}: {emitted} labels on {frames} frames"


def _one(waveform):
    return torch.as_tensor(waveform)[None], torch.tensor([len(waveform)])


def test_checkpoint_from_s3_decodes_like_nemo(nemo_assets, nemo_results, tmp_path):
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    from tests.support.s3_server import moto_s3

    path = nemo_assets["checkpoints"]["tdt_ctc"]
    with moto_s3("checkpoints") as endpoint:
        import boto3

        boto3.client("s3", endpoint_url=endpoint).upload_file(str(path), "checkpoints", "asr/tdt_ctc.nemo")
        model = load_asr_model("s3://checkpoints/asr/tdt_ctc.nemo", cache_dir=tmp_path / "cache",
                               sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    assert [p.name for p in (tmp_path / "cache" / "blobs").iterdir()] == [
        f"{hashlib.sha256(path.read_bytes()).hexdigest()}.nemo"]
    for head in ("transducer", "ctc"):
        assert_same_as_nemo(model, nemo_assets["waveforms"], nemo_results("tdt_ctc", head), head)


def test_wrong_sha256_is_refused_before_loading(nemo_assets):
    with pytest.raises(ValueError, match="sha256"):
        load_asr_model(str(nemo_assets["checkpoints"]["ctc"]), sha256="0" * 64)
