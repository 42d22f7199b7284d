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

from pipeline.models import load_asr_model
from pipeline.recognize import recognize

pytestmark = pytest.mark.nemo

BATCH_SIZE = 4


@pytest.fixture(scope="session")
def nemo_results(nemo_assets):
    """NeMo's own greedy_batch transcription of the files, per (kind, head), computed on first use."""
    cache: dict = {}

    def results(kind: str, head: str):
        if (kind, head) not in cache:
            from nemo.collections.asr.models import ASRModel
            from omegaconf import open_dict

            model = ASRModel.restore_from(str(nemo_assets["checkpoints"][kind]), map_location="cpu")
            decoder_type = "rnnt" if head == "transducer" else "ctc"
            decoding = model.cfg.aux_ctc.decoding if hasattr(model, "ctc_decoder") and head == "ctc" \
                else model.cfg.decoding
            with open_dict(decoding):
                decoding.strategy = "greedy_batch"
            if hasattr(model, "ctc_decoder"):
                model.change_decoding_strategy(decoding, decoder_type=decoder_type, verbose=False)
            else:
                model.change_decoding_strategy(decoding, verbose=False)
            cache[kind, head] = model.transcribe([str(p) for p in nemo_assets["files"]], batch_size=1,
                                                 timestamps=True, num_workers=0, verbose=False)
        return cache[kind, head]

    return results


def assert_same_as_nemo(model, waveforms, hypotheses, head: str) -> int:
    ours = []
    for start in range(0, len(waveforms), BATCH_SIZE):
        ours += recognize(model, waveforms[start:start + BATCH_SIZE], head=head)
    emitted = 0
    for index, (transcript, hypothesis) in enumerate(zip(ours, hypotheses, strict=True)):
        if head == "transducer":
            assert transcript.tokens == [int(t) for t in hypothesis.y_sequence], f"file {index}"
        else:
            # NeMo's CTC path replaces y_sequence by the log-probs: compare each token's text and first frame
            pieces = [model.tokenizer.pieces_to_text([p]) for p in transcript.pieces]
            assert pieces == [c["char"] for c in hypothesis.timestamp["char"]], f"file {index}"
            assert [c["start_offset"] for c in hypothesis.timestamp["char"]] == [
                max(transcript.frame_indices[0] - 1, 0), *transcript.frame_indices[:-1]], f"file {index}"
        assert transcript.text == hypothesis.text, f"file {index}"
        nemo_words = [(w["word"], int(w["start_offset"]), int(w["end_offset"]), float(w["start"]), float(w["end"]))
                      for w in hypothesis.timestamp["word"] if w["word"]]
        our_words = [(w.text, w.start_frame, w.end_frame, w.start_s, w.end_s) for w in transcript.words]
        assert [w[:3] for w in our_words] == [w[:3] for w in nemo_words], f"file {index}"
        assert [s for w in our_words for s in w[3:]] == pytest.approx([s for w in nemo_words for s in w[3:]])
        emitted += len(transcript.tokens)
    return emitted


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
        emitted = assert_same_as_nemo(model, waveforms, nemo_results(kind, head), head)
        assert 0.1 < emitted / frames < 1.0, f"{kind} {head}: {emitted} labels on {frames} frames"


def _one(waveform):
    return torch.as_tensor(waveform)[None], torch.tensor([len(waveform)])


def test_checkpoint_from_s3_decodes_like_nemo(nemo_assets, nemo_results, tmp_path):
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    from tests.pipeline.s3_server import moto_s3

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
