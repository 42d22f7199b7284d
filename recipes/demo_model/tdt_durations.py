"""How a TDT model's greedy path moves: the durations it picks for blanks and for labels, and joint steps per frame.

    python tdt_durations.py ../../models/demo_hybrid_tdt_ctc.nemo /root/loopscribe-data/manifests/test.json --limit 300

Walks NeMo's own prediction network and joint one utterance at a time (greedy: argmax label, argmax duration; a
blank moves at least one frame), so it shows what the model predicts, independent of loopscribe's decoders.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import soundfile
import torch
from nemo.collections.asr.models import ASRModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a TDT or hybrid TDT + CTC .nemo")
    parser.add_argument("manifest", help="NeMo manifest; relative audio paths are relative to it")
    parser.add_argument("--limit", type=int, help="only the first N utterances")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = ASRModel.restore_from(args.model, map_location="cpu").eval()
    durations = list(model.cfg.decoding.durations)
    blank = model.tokenizer.vocab_size  # the joint's outputs: labels, blank, then one per duration
    manifest = Path(args.manifest)
    rows = [json.loads(line) for line in manifest.read_text().splitlines()][: args.limit]
    blank_moves, label_moves, frames, steps = Counter(), Counter(), 0, 0
    with torch.inference_mode():
        for row in rows:
            audio, _ = soundfile.read(manifest.parent / row["audio_filepath"], dtype="float32")
            signal = torch.from_numpy(audio)[None]
            features, lengths = model.preprocessor(input_signal=signal, length=torch.tensor([signal.shape[1]]))
            encoded, encoded_lengths = model.encoder(audio_signal=features, length=lengths)
            encoded = model.joint.project_encoder(encoded.transpose(1, 2))
            length = int(encoded_lengths[0])
            frames += length
            prediction, state = model.decoder.predict(None, state=None, add_sos=False, batch_size=1)
            prediction = model.joint.project_prednet(prediction)
            t = 0
            while t < length:
                logits = model.joint.joint_after_projection(encoded[:, t:t + 1], prediction).reshape(-1)
                label = int(logits[: blank + 1].argmax())
                move = durations[int(logits[blank + 1:].argmax())]
                steps += 1
                if label == blank:
                    move = max(move, 1)
                    blank_moves[move] += 1
                else:
                    label_moves[move] += 1
                    prediction, state = model.decoder.predict(torch.tensor([[label]]), state=state, add_sos=False,
                                                              batch_size=1)
                    prediction = model.joint.project_prednet(prediction)
                t += move
    print(json.dumps({"utterances": len(rows), "frames": frames, "joint_steps_per_frame": round(steps / frames, 3),
                      "blank_durations": dict(sorted(blank_moves.items())),
                      "label_durations": dict(sorted(label_moves.items()))}))


if __name__ == "__main__":
    main()
