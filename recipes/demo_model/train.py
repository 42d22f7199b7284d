"""Train (or resume training of) the small hybrid RNN-T + CTC model with NeMo's own training code.

    nice -n 10 python train.py --config fastconformer_hybrid_small.yaml --threads 2 [key=value ...]

Every run with the same exp_manager.exp_dir resumes from its last checkpoint (exp_manager.resume_if_exists),
so the command that starts training is also the command that resumes it. Extra `key=value` arguments are
OmegaConf overrides, e.g. `trainer.max_steps=20 trainer.limit_train_batches=10` for a smoke run.

On a GPU with a time budget (`./run.sh gpu-train`): `--init-from` a trained model, `--wall-schedule` to end the
learning rate and the run at a deadline, `--stall-timeout` so a hung loader does not hold the GPU.

Besides NeMo's own logs, each validation appends one line to <exp_dir>/curve.tsv: UTC time, step, training
wall hours and audio hours so far (summed over resumes), dev WER of the RNN-T and CTC heads.
"""

from __future__ import annotations

import argparse
import faulthandler
import math
import os
import sys
import threading
import time
import traceback
from pathlib import Path

# CPU traps (docs/demo_model.md): busy-waiting OpenMP threads fight the other processes on a 2-core machine.
# Set before torch and numba are imported; --threads below sets torch's intra-op threads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("NUMBA_NUM_THREADS", "2")

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402
from evaluate import load  # noqa: E402
from nemo.collections.asr.models import EncDecHybridRNNTCTCBPEModel  # noqa: E402
from nemo.utils.exp_manager import exp_manager  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from rnnt_loss_torch import use_torch_rnnt_loss  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(Path(__file__).with_name("fastconformer_hybrid_small.yaml")))
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--cooldown-from", metavar="CKPT",
                        help="a cool-down branch: this checkpoint's weights, a fresh optimizer, and the learning rate "
                             "it was training at, warmed up again over 40 steps and annealed to zero by "
                             "trainer.max_steps")
    parser.add_argument("--init-from", metavar="MODEL",
                        help="start from these weights (a .nemo or .ckpt of the same architecture, or an RNN-T model "
                             "for its TDT variant: train.transfer_weights) with a fresh optimizer")
    parser.add_argument("--wall-schedule", nargs=3, type=float, metavar=("SINCE", "UNTIL", "PEAK_LR"),
                        help="learning rate by wall clock instead of by step, for a run with a fixed time budget "
                             "(a rented GPU): warm up to PEAK_LR over the first 3%% of SINCE..UNTIL (unix seconds), "
                             "cosine to 1%% of it by UNTIL, then save <exp_dir>/final.ckpt and stop; absolute times, "
                             "so a restarted run continues the same schedule")
    parser.add_argument("--torch-rnnt-loss", action="store_true",
                        help="the vectorized torch RNN-T or TDT loss (rnnt_loss_torch.py) on any device; default on "
                             "the CPU only")
    parser.add_argument("--stall-timeout", type=float, default=0, metavar="SECONDS",
                        help="exit (status 3, all threads' stacks printed) when no training or validation batch has "
                             "finished for this long, e.g. when lhotse's sampler thread has died and the loader waits "
                             "on it forever; 0 (default): never")
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
        print(f"cool-down from step {start['global_step']} at lr {lr:.2e} over {cfg.trainer.max_steps} steps",
              flush=True)
    callbacks = []
    exp_dir = Path(cfg.exp_manager.exp_dir)
    exp_dir.mkdir(parents=True, exist_ok=True)
    if args.wall_schedule:
        since, until, peak = args.wall_schedule
        cfg.model.optim.lr = peak
        cfg.model.optim.pop("sched", None)  # no step-based scheduler: WallClockSchedule sets the rate
        callbacks.append(WallClockSchedule(since, until, peak, exp_dir / "final.ckpt"))
        print(f"wall-clock schedule: peak lr {peak:.2e}, {(until - time.time()) / 60:.1f} minutes left", flush=True)

    if args.stall_timeout:
        callbacks.append(StallWatchdog(args.stall_timeout))

    trainer = pl.Trainer(**OmegaConf.to_container(cfg.trainer, resolve=True),
                         callbacks=[Curve(exp_dir / "curve.tsv"), *callbacks])
    exp_manager(trainer, cfg.get("exp_manager"))
    model = EncDecHybridRNNTCTCBPEModel(cfg=cfg.model, trainer=trainer)
    if start is not None:
        model.load_state_dict(start["state_dict"])  # strict: the branch has the main run's exact architecture
    if args.init_from and not any(exp_dir.glob("*/checkpoints/*-last.ckpt")):  # a resumed run has its own weights
        extended = transfer_weights(model, load(args.init_from).state_dict())  # evaluate.load: a .nemo or a .ckpt
        print(f"initialized from {args.init_from}" + (f"; extended, new rows at init: {extended}" if extended else ""),
              flush=True)
    if cfg.trainer.accelerator == "cpu" or args.torch_rnnt_loss:
        use_torch_rnnt_loss(model)  # NeMo's CPU RNN-T loss loops over the lattice in Python (rnnt_loss_torch.py)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"parameters: {parameters} ({parameters / 1e6:.2f} M)", flush=True)
    # lhotse's bucketing sampler leaves a non-daemon producer thread blocked on a queue, so the interpreter
    # would wait forever at exit, also after an error (a GPU run once sat 6 minutes on a failed first step that way)
    status = 0
    try:
        trainer.fit(model)
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def transfer_weights(model: torch.nn.Module, source: dict) -> list[str]:
    """Load `source` into `model`, where the model may have more outputs along dim 0 than the source: a TDT
    model's joint has the RNN-T joint's token + blank outputs first, then one per duration. Those tensors get the
    source's rows first and keep their fresh initialization in the rest; any other mismatch is an error."""
    target = model.state_dict()
    if set(source) != set(target):
        raise ValueError(f"different parameters: missing {sorted(set(target) - set(source))}, "
                         f"unexpected {sorted(set(source) - set(target))}")
    merged, extended = {}, []
    for name, value in source.items():
        want = target[name]
        if value.shape == want.shape:
            merged[name] = value
        elif value.shape[1:] == want.shape[1:] and value.shape[0] < want.shape[0]:
            merged[name] = torch.cat([value, want[value.shape[0]:]])
            extended.append(f"{name} {tuple(value.shape)} -> {tuple(want.shape)}")
        else:
            raise ValueError(f"{name}: shape {tuple(value.shape)} cannot initialize {tuple(want.shape)}")
    model.load_state_dict(merged)
    return extended


class WallClockSchedule(pl.Callback):
    """Learning rate as a function of wall-clock time between two absolute instants; stops at the second."""

    WARMUP = 0.03
    FLOOR = 0.01

    def __init__(self, since: float, until: float, peak: float, final: Path) -> None:
        self.since, self.until, self.peak, self.final = since, until, peak, final

    def rate(self, now: float) -> float:
        fraction = min(max((now - self.since) / (self.until - self.since), 0.0), 1.0)
        if fraction < self.WARMUP:
            return self.peak * max(fraction / self.WARMUP, self.FLOOR)
        progress = (fraction - self.WARMUP) / (1 - self.WARMUP)
        return self.peak * (self.FLOOR + (1 - self.FLOOR) * 0.5 * (1 + math.cos(math.pi * progress)))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = self.rate(time.time())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if time.time() >= self.until and not trainer.should_stop:
            trainer.save_checkpoint(self.final, weights_only=True)
            print(f"[wall-schedule] time is up at step {trainer.global_step}: wrote {self.final}", flush=True)
            trainer.should_stop = True


class StallWatchdog(pl.Callback):
    """Ends the process when batches stop finishing: a rented GPU should not sit idle on a hung loader."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.last = time.monotonic()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while True:
            time.sleep(min(10.0, self.timeout_s))
            if time.monotonic() - self.last > self.timeout_s:
                print(f"[stall] no batch finished for {self.timeout_s:.0f} s; exiting", flush=True)
                faulthandler.dump_traceback(all_threads=True)
                sys.stderr.flush()
                os._exit(3)

    def on_train_batch_end(self, *args) -> None:
        self.last = time.monotonic()

    def on_validation_batch_end(self, *args) -> None:
        self.last = time.monotonic()


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
            lr = trainer.optimizers[0].param_groups[0]["lr"]
            print(f"[train] step {trainer.global_step} loss {float(loss):.3f} lr {lr:.2e} "
                  f"batch {tuple(batch[0].shape)} audio {self.audio_s / 3600:.2f} h "
                  f"in {self.train_wall_s / 3600:.3f} h "
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
