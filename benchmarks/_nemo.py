"""NeMo's own decoding of a loaded model, as the benchmarks time it against ours: one head and one strategy
(`greedy_batch`, `malsd_batch`, ...), decoder only (encoder output -> `Hypothesis` objects) and end to end
(padded waveforms -> hypotheses with text and word timestamps, what `transcribe()` runs after its data loader).

Imports NeMo when a `NemoDecoding` is made: import this module only where nemo_toolkit is installed.
"""

from __future__ import annotations

import torch


class NemoDecoding:
    """NeMo's decoding of one head of an `AsrModel` with `strategy` (beam strategies with `beam_size`)."""

    def __init__(self, model, head: str, strategy: str = "greedy_batch", beam_size: int | None = None) -> None:
        from omegaconf import open_dict

        self.nemo_model, self.head, self.strategy = model.nemo_model, head, strategy
        is_hybrid = hasattr(self.nemo_model, "ctc_decoder")
        self.config = (self.nemo_model.cfg.aux_ctc.decoding if is_hybrid and head == "ctc"
                       else self.nemo_model.cfg.decoding)
        with open_dict(self.config):
            self.config.strategy = strategy
            self.config.compute_timestamps = True
            if beam_size is not None:
                if "beam" not in self.config:  # a built model's config that never left greedy has no beam section
                    self.config.beam = {}
                self.config.beam.beam_size = beam_size
        self.change_kwargs = {"decoder_type": "rnnt" if head == "transducer" else "ctc"} if is_hybrid else {}
        self.is_hybrid = is_hybrid
        self.ctc_head = (self.nemo_model.ctc_decoder if is_hybrid else self.nemo_model.decoder) if head == "ctc" \
            else None
        self.activate()

    def activate(self) -> None:
        """Make this strategy the model's decoding: several `NemoDecoding`s of one model take turns."""
        self.nemo_model.change_decoding_strategy(self.config, verbose=False, **self.change_kwargs)
        self.decoding = (self.nemo_model.ctc_decoding if self.is_hybrid and self.head == "ctc"
                         else self.nemo_model.decoding)
        self.nemo_model.eval()

    @torch.no_grad()
    def decoder_only(self, encoder_output, encoder_lengths):
        """encoder_output [B, T, D] -> NeMo Hypothesis objects (token ids, frames)."""
        if self.head == "transducer":
            return self.decoding.decoding(encoder_output=encoder_output.transpose(1, 2),
                                          encoded_lengths=encoder_lengths)[0]
        # a fresh view (NeMo's ctc_decoder_predictions_tensor passes one): the head's output carries a neural
        # type that the decoding computer's type check rejects
        log_probs = self.ctc_head(encoder_output=encoder_output.transpose(1, 2)).movedim(0, 0)
        with torch.inference_mode():
            return self.decoding.decoding(decoder_output=log_probs, decoder_lengths=encoder_lengths)[0]

    @torch.no_grad()
    def end_to_end(self, waveforms, lengths):
        """waveforms [B, S], lengths [B] -> hypotheses with text and word timestamps in seconds."""
        from nemo.collections.asr.parts.utils.timestamp_utils import process_timestamp_outputs

        model = self.nemo_model
        model.eval()
        features, feature_lengths = model.preprocessor(input_signal=waveforms, length=lengths)
        encoded, encoded_lengths = model.encoder(audio_signal=features, length=feature_lengths)
        if self.head == "transducer":
            hypotheses = self.decoding.rnnt_decoder_predictions_tensor(encoder_output=encoded,
                                                                       encoded_lengths=encoded_lengths,
                                                                       return_hypotheses=True)
        else:
            hypotheses = self.decoding.ctc_decoder_predictions_tensor(self.ctc_head(encoder_output=encoded),
                                                                      decoder_lengths=encoded_lengths,
                                                                      return_hypotheses=True)
        return process_timestamp_outputs(hypotheses, model.encoder.subsampling_factor,
                                         model.cfg.preprocessor.window_stride)
