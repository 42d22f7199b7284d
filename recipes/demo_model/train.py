"""Train (or resume training of) the small hybrid RNN-T + CTC model with NeMo's own training code.

    nice -n 10 python train.py --config fastconformer_hybrid_small.yaml --threads 2 [key=value ...]

Every run with the same exp_manager.exp_dir resumes from its last checkpoint (exp_manager.resume_if_exists),
so the command that starts training is also the command that resumes it. Extra `key=value` arguments are
OmegaConf overrides, e.g. `trainer.max_steps=20 trainer.limit_train_batches=10` for a smoke run.

Besides NeMo's own logs, each validation appends one line to <exp_dir>/curve.tsv: UTC time, step, training
wall hours and audio hours so far (summed over resumes), dev WER of the RNN-T and CTC heads.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# CPU traps (docs/demo_model.md): busy-waiting OpenMP threads fight the other processes on a 2-core machine.
# Set before torch and numba are imported; --threads below sets torch's intra-op threads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("NUMBA_NUM_THREADS", "2")

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402
from nemo.collections.asr.models import EncDecHybridRNNTCTCBPEModel  # noqa: E402
from nemo.utils.exp_manager import exp_manager  # noqa: E402
from rnnt_loss_torch import use_torch_rnnt_loss  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(Path(__file__).with_name("fastconformer_hybrid_small.yaml")))
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--cooldown-from", metavar="CKPT",
                        help="a cool-down branch: this checkpoint's weights, a fresh optimizer, and the learning rate it "
                             "was training at, warmed up again over 40 steps and annealed to zero by trainer.max_steps")
    parser.add_argument("overrides", nargs="*", help="OmegaConf key=value overrides")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # denormal floats in small gradients make CPU kernels 5-10x slower

    cfg = OmegaConf.merge(OmegaConf.load(args.config), OmegaConf.from_dotlist(args.overrides))
    start = None
    if args.cooldown_from:
        start = torch.load(args.cooldown_from, map_location="cpu", weights_only=False)
        lr = start["optimizer_states"][0]["param_groups"][0]["lr"]
        cfg.model.optim.lr = lr
        cfg.model.optim.sched = {"name": "CosineAnnealing", "warmup_steps": 40, "min_lr": 1e-6}
        print(f"cool-down from step {start['global_step']} at lr {lr:.2e} over {cfg.trainer.max_steps} steps", flush=True)
    exp_dir = Path(cfg.exp_manager.exp_dir)
    exp_dir.mkdir(parents=True, exist_ok=True)

    trainer = pl.Trainer(**OmegaConf.to_container(cfg.trainer, resolve=True), callbacks=[Curve(exp_dir / "curve.tsv")])
    exp_manager(trainer, cfg.get("exp_manager"))
    model = EncDecHybridRNNTCTCBPEModel(cfg=cfg.model, trainer=trainer)
    if start is not None:
        model.load_state_dict(start["state_dict"])  # strict: the branch has the main run's exact architecture
    if cfg.trainer.accelerator == "cpu":
        use_torch_rnnt_loss(model)  # NeMo's CPU RNN-T loss loops over the lattice in Python (rnnt_loss_torch.py)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"parameters: {parameters} ({parameters / 1e6:.2f} M)", flush=True)
    trainer.fit(model)
    # lhotse's bucketing sampler leaves a non-daemon producer thread blocked on a queue, so the interpreter
    # would wait forever at exit; everything is saved by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class Curve(pl.Callback):
    """Wall time and audio seen, summed across resumes (saved in checkpoints); one TSV line per validation."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.train_wall_s = 0.0
        self.audio_s = 0.0
        self._batch_started = 0.0

    def state_dict(self) -> dict:
        return {"train_wall_s": self.train_wall_s, "audio_s": self.audio_s}

    def load_state_dict(self, state_dict: dict) -> None:
        self.train_wall_s = state_dict["train_wall_s"]
        self.audio_s = state_dict["audio_s"]

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._batch_started = time.time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.train_wall_s += time.time() - self._batch_started
        self.audio_s += float(batch[1].sum()) / pl_module.cfg.sample_rate  # batch[1]: audio lengths in samples
        if trainer.global_step % trainer.log_every_n_steps == 0:
            loss = trainer.callback_metrics.get("train_loss", float("nan"))
            print(f"[train] step {trainer.global_step} loss {float(loss):.3f} lr {trainer.optimizers[0].param_groups[0]['lr']:.2e} "
                  f"batch {tuple(batch[0].shape)} audio {self.audio_s / 3600:.2f} h in {self.train_wall_s / 3600:.3f} h "
                  f"({self.audio_s / max(self.train_wall_s, 1e-9):.1f}x real time)", flush=True)

    def on_validation_end(self, trainer, pl_module) -> None:
        # not on_validation_epoch_end: callbacks run that hook before the model logs val_wer
        metrics = trainer.callback_metrics
        values = [float(metrics[k]) if k in metrics else float("nan") for k in ("val_wer", "val_wer_ctc", "train_loss")]
        if not self.path.exists():
            self.path.write_text("utc\tstep\ttrain_wall_h\taudio_h\tval_wer\tval_wer_ctc\ttrain_loss\n")
        with open(self.path, "a") as f:
            f.write(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + f"\t{trainer.global_step}"
                    f"\t{self.train_wall_s / 3600:.3f}\t{self.audio_s / 3600:.2f}"
                    + "".join(f"\t{v:.4f}" for v in values) + "\n")
        rate = self.audio_s / max(self.train_wall_s, 1e-9)
        print(f"[curve] step {trainer.global_step} train {self.train_wall_s / 3600:.2f} h, audio "
              f"{self.audio_s / 3600:.1f} h ({rate:.0f}x real time) val_wer {values[0]:.4f} "
              f"val_wer_ctc {values[1]:.4f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
