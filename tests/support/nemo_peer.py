"""NeMo as the peer of our greedy decoders: NeMo's own `greedy_batch` transcription of audio files with word
timestamps, and the check that ours gives the same tokens, text and word timestamps (module docstring of
tests/pipeline/model/test_nemo.py: why NeMo runs at batch size 1 and on files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.decoding.recognize import recognize

BATCH_SIZE = 4


def nemo_transcribe(checkpoint: Path, files: list[Path], head: str) -> list:
    """NeMo's greedy_batch hypotheses (with timestamps) of `files` by one head of the `.nemo` at `checkpoint`."""
    from nemo.collections.asr.models import ASRModel
    from omegaconf import open_dict

    model = ASRModel.restore_from(str(checkpoint), map_location="cpu")
    decoder_type = "rnnt" if head == "transducer" else "ctc"
    decoding = model.cfg.aux_ctc.decoding if hasattr(model, "ctc_decoder") and head == "ctc" else model.cfg.decoding
    with open_dict(decoding):
        decoding.strategy = "greedy_batch"
    if hasattr(model, "ctc_decoder"):
        model.change_decoding_strategy(decoding, decoder_type=decoder_type, verbose=False)
    else:
        model.change_decoding_strategy(decoding, verbose=False)
    return model.transcribe([str(p) for p in files], batch_size=1, timestamps=True, num_workers=0, verbose=False)


def assert_same_as_nemo(model, waveforms, hypotheses, head: str) -> list:
    """Our transcripts of `waveforms` (in batches of BATCH_SIZE) equal NeMo's `hypotheses`; returns ours."""
    ours = []
    for start in range(0, len(waveforms), BATCH_SIZE):
        ours += recognize(model, waveforms[start:start + BATCH_SIZE], head=head)
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
    return ours
