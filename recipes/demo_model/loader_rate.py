"""How fast one training-loader worker makes batches: is a GPU run held back by its loader or by its step?

    python loader_rate.py --manifest /root/loopscribe-data/manifests/train_all.json --scale 8 --batches 20

Builds the training loader exactly as `train.py` does (the recipe's config, `gpu-train`'s buffers and bucket
batch sizes times `--scale`) but in this process (no worker processes), takes one batch to fill the buffers,
then times `--batches` more. A run with N loader workers can read about N times the printed rate; compare it with
the real-time rate of the `[train]` lines, which time the step alone.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from evaluate import load  # noqa: E402
from omegaconf import OmegaConf, open_dict  # noqa: E402

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--model", default=str(HERE.parents[1] / "models" / "demo_hybrid_rnnt_ctc.nemo"))
    parser.add_argument("--scale", type=int, default=8, help="BATCH_SCALE of gpu-train")
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load(args.model)
    config = OmegaConf.load(HERE / "fastconformer_hybrid_small.yaml").model.train_ds
    with open_dict(config):
        config.sample_rate = 16000
        config.manifest_filepath = args.manifest
        config.num_workers = 0
        config.bucket_batch_size = [size * args.scale for size in config.bucket_batch_size]
        config.bucket_buffer_size = config.shuffle_buffer_size = 20000  # as gpu-train
    model.setup_training_data(config)
    batches = iter(model._train_dl)
    started = time.perf_counter()
    next(batches)
    print(f"first batch (buffers filled) after {time.perf_counter() - started:.1f} s", flush=True)
    audio_s, started = 0.0, time.perf_counter()
    for _ in range(args.batches):
        audio_s += float(next(batches)[1].sum()) / 16000  # [1]: audio lengths in samples
    seconds = time.perf_counter() - started
    print(f"scale {args.scale}: {args.batches} batches in {seconds:.1f} s, {seconds / args.batches:.2f} s and "
          f"{audio_s / args.batches:.0f} s of audio a batch: {audio_s / seconds:.0f}x real time per worker", flush=True)
    os._exit(0)  # lhotse's sampler thread would keep the interpreter alive


if __name__ == "__main__":
    main()
