"""Average the weights of several training checkpoints into one checkpoint (checkpoint averaging).

    python average.py --out averaged.ckpt snapshots/*.ckpt
    python evaluate.py --checkpoint averaged.ckpt --nemo averaged.nemo

Averaging the last few checkpoints of one run smooths the step-to-step noise of a model still far from
converged (docs/demo_model.md measures what it gains here). Floating-point tensors are averaged; integer
ones (BatchNorm's `num_batches_tracked`) are taken from the newest checkpoint, as is everything else in it
(hyper-parameters, step) except the optimizer and scheduler states, which are dropped: the result is for
export and evaluation, not for resuming. `train.py` saves a checkpoint every validation; keep copies of
`*-last.ckpt` as it advances (`save_top_k` deletes the others) to have something to average.
"""

from __future__ import annotations

import argparse

import torch


def average(paths: list[str]) -> dict:
    checkpoints = [torch.load(path, map_location="cpu", weights_only=False) for path in paths]
    checkpoints.sort(key=lambda c: c["global_step"])
    newest = checkpoints[-1]
    averaged = {}
    for name, value in newest["state_dict"].items():
        if value.is_floating_point():
            total = sum(c["state_dict"][name].double() for c in checkpoints)
            averaged[name] = total.div(len(checkpoints)).to(value.dtype)
        else:
            averaged[name] = value
    dropped = ("optimizer_states", "lr_schedulers")
    result = {key: value for key, value in newest.items() if key not in dropped}
    result["state_dict"] = averaged
    result["averaged_steps"] = [c["global_step"] for c in checkpoints]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the averaged checkpoint (.ckpt)")
    parser.add_argument("checkpoints", nargs="+", help="checkpoints of one run")
    args = parser.parse_args()
    result = average(args.checkpoints)
    torch.save(result, args.out)
    print(f"averaged steps {result['averaged_steps']} -> {args.out}")


if __name__ == "__main__":
    main()
