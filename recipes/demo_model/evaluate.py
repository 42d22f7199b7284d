"""Export a training checkpoint to .nemo and measure greedy WER/CER of the RNN-T and CTC heads with jiwer.

    python evaluate.py \
        --checkpoint /root/loopscribe-train/loopscribe-demo-hybrid-rnnt-ctc/checkpoints/<name>-last.ckpt \
        --nemo /root/loopscribe-train/demo_hybrid_rnnt_ctc.nemo \
        --manifests /root/loopscribe-data/manifests/test.json /root/loopscribe-data/manifests/domain_test.json

--checkpoint may also be a .nemo file (then nothing is exported). Prints one table row per manifest, head
and group (all / voices seen in training / held out; with --by-condition also by the SNR of the added noise
and the speaking rate), and writes the rows as JSON next to the .nemo.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import jiwer  # noqa: E402
import torch  # noqa: E402
from nemo.collections.asr.models import ASRModel, EncDecHybridRNNTCTCBPEModel  # noqa: E402
from omegaconf import open_dict  # noqa: E402


def load(checkpoint: str) -> EncDecHybridRNNTCTCBPEModel:
    if checkpoint.endswith(".nemo"):
        return ASRModel.restore_from(checkpoint, map_location="cpu")
    return EncDecHybridRNNTCTCBPEModel.load_from_checkpoint(checkpoint, map_location="cpu")


def transcribe(model: EncDecHybridRNNTCTCBPEModel, paths: list[str], head: str, batch_size: int) -> list[str]:
    decoding = model.cfg.aux_ctc.decoding if head == "ctc" else model.cfg.decoding
    with open_dict(decoding):
        decoding.strategy = "greedy_batch"
    model.change_decoding_strategy(decoding, decoder_type=head, verbose=False)
    hypotheses = model.transcribe(paths, batch_size=batch_size, verbose=False)
    if isinstance(hypotheses, tuple):  # some NeMo versions return (best, all)
        hypotheses = hypotheses[0]
    return [h.text if hasattr(h, "text") else h for h in hypotheses]


def label(model: EncDecHybridRNNTCTCBPEModel, head: str) -> str:
    """The head's name in the results: NeMo calls a TDT transducer "rnnt" too."""
    return "tdt" if head == "rnnt" and model.cfg.decoding.get("model_type") == "tdt" else head


def score(references: list[str], hypotheses: list[str]) -> dict:
    return {
        "utterances": len(references),
        "wer": round(jiwer.wer(references, hypotheses), 4),
        "cer": round(jiwer.cer(references, hypotheses), 4),
    }


def condition_groups(entries: list[dict], by_condition: bool) -> dict[str, list[int]]:
    """Utterance indices per group: all, seen / held-out voices, and with by_condition the added noise's SNR
    and the speaking rate (the synthesis fields synthesize.py writes into the manifest). Empty groups dropped."""
    keys = {"all": lambda e: True}
    if any("voice_seen" in e for e in entries):
        keys["seen_voices"] = lambda e: e.get("voice_seen", True)
        keys["held_out_voices"] = lambda e: not e.get("voice_seen", True)
    if by_condition and any("snr_db" in e for e in entries):
        keys["no_noise"] = lambda e: e.get("snr_db") is None
        keys["snr_below_15db"] = lambda e: e.get("snr_db") is not None and e["snr_db"] < 15
        keys["snr_15_to_25db"] = lambda e: e.get("snr_db") is not None and 15 <= e["snr_db"] < 25
        keys["snr_25db_up"] = lambda e: e.get("snr_db") is not None and e["snr_db"] >= 25
    if by_condition and any("speed_wpm" in e for e in entries):
        keys["below_150wpm"] = lambda e: e.get("speed_wpm", 0) < 150
        keys["150_to_190wpm"] = lambda e: 150 <= e.get("speed_wpm", 0) < 190
        keys["190wpm_up"] = lambda e: e.get("speed_wpm", 0) >= 190
    groups = {name: [i for i, e in enumerate(entries) if keep(e)] for name, keep in keys.items()}
    return {name: indices for name, indices in groups.items() if indices}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--nemo", help="where to write the .nemo (only for a .ckpt)")
    parser.add_argument("--manifests", nargs="+", default=["/root/loopscribe-data/manifests/test.json",
                                                           "/root/loopscribe-data/manifests/domain_test.json"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--examples", type=int, default=3, help="print this many hypotheses per manifest")
    parser.add_argument("--by-condition", action="store_true",
                        help="also score by added-noise SNR and speaking rate (from the manifest's synthesis fields)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)

    model = load(args.checkpoint).eval()
    nemo_path = args.checkpoint
    if args.nemo and not args.checkpoint.endswith(".nemo"):
        model.save_to(args.nemo)
        nemo_path = args.nemo
        print(f"wrote {args.nemo} ({os.path.getsize(args.nemo) / 1e6:.1f} MB)")

    rows = []
    for manifest in args.manifests:
        entries = [json.loads(line) for line in open(manifest)]
        paths = [e["audio_filepath"] for e in entries]
        references = [e["text"] for e in entries]
        for head in ("rnnt", "ctc"):
            started = time.time()
            hypotheses = transcribe(model, paths, head, args.batch_size)
            wall_s = time.time() - started
            for group, indices in condition_groups(entries, args.by_condition).items():
                row = {"manifest": Path(manifest).stem, "head": label(model, head), "group": group,
                       **score([references[i] for i in indices], [hypotheses[i] for i in indices])}
                if group == "all":
                    row["wall_s"] = round(wall_s, 1)
                rows.append(row)
                print(json.dumps(row), flush=True)
            for i in range(min(args.examples, len(entries))):
                print(f"  ref: {references[i]}\n  hyp: {hypotheses[i]}")

    out = Path(nemo_path).with_suffix(".eval.json")
    out.write_text(json.dumps({"checkpoint": args.checkpoint, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
