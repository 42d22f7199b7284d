"""The encoder memory model (`pipeline/model/memory.py`) against the measured peak of real encoder passes, on the CPU.

For each encoder (the bundled demo model; the production shapes at reduced depth: an encoder's activations do not
grow with depth, its weights do) and each point (batch rows x padded seconds, full or local attention), one
`AsrModel.encode` pass runs in a child process started with `MALLOC_MMAP_THRESHOLD_=65536` (every large
allocation its own mapping, returned when freed, so resident memory follows what is live); its peak is the rise
of the process's high-water mark (`VmHWM`, reset through `/proc/self/clear_refs`) over its resident memory
before the pass. The table gives the predicted peak, the measured one and their ratio (above 1: the model
over-estimates, which is the safe side; the budget is what sizes batches).

    python benchmarks/encoder_memory.py --quick          # the demo model and one shape, 8 points
    python benchmarks/encoder_memory.py                  # every encoder, every point
    python benchmarks/encoder_memory.py --full-depth     # adds parakeet-tdt-0.6b at 24 layers (3.5 GB to build)

Linux only (`/proc`). The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

QUICK_POINTS = [("full", 1, 60.0), ("full", 1, 120.0), ("full", 2, 60.0), ("local", 1, 120.0)]
POINTS = [("full", 1, 30.0), ("full", 1, 60.0), ("full", 1, 120.0), ("full", 1, 240.0), ("full", 2, 120.0),
          ("local", 1, 120.0), ("local", 1, 240.0), ("local", 2, 120.0)]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="the demo model and parakeet-tdt-0.6b at 1 layer, 4 points")
    parser.add_argument("--full-depth", action="store_true", help="also parakeet-tdt-0.6b at its 24 layers")
    parser.add_argument("--local-context", type=int, default=128, help="frames a side with local attention")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one encoder, measured in this process
    return parser.parse_args()


def _kib(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def measure_child(spec: dict) -> list[dict]:
    """In the child: build or load the encoder of `spec`, then one pass per point -> the measured peaks."""
    import torch

    from pipeline.model.memory import encoder_memory
    from pipeline.model.nemo import AsrModel, load_asr_model

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if spec["source"] == "file":
        model = load_asr_model(spec["path"])
    else:
        from recipes.production_shapes.shapes import build_random_model, shape_named, train_tokenizer

        shape = shape_named(spec["shape"], spec["layers"])
        tokenizer = Path(spec["scratch"]) / f"tokenizer_{shape.text}_{shape.vocab_size}"
        if not tokenizer.exists():
            train_tokenizer(tokenizer, shape.vocab_size, shape.text)
        model = AsrModel(build_random_model(shape, tokenizer))
    results = []
    attention_now = "full"
    for attention, rows, seconds in spec["points"]:
        if attention != attention_now:
            model.use_local_attention(spec["local_context"])
            attention_now = attention
        predicted = encoder_memory(model.config, "cpu", attention, spec["local_context"]).batch_bytes(rows, seconds)
        waveforms = torch.randn(rows, int(seconds * model.sample_rate)) * 0.1
        lengths = torch.full((rows,), waveforms.shape[1])
        before = _kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")
        started = time.perf_counter()
        model.encode(waveforms, lengths)
        wall_s = time.perf_counter() - started
        measured = (_kib("VmHWM") - before) * 1024
        results.append({"attention": attention, "rows": rows, "seconds": seconds, "predicted_bytes": predicted,
                        "measured_bytes": measured, "ratio": predicted / max(measured, 1), "wall_s": wall_s})
    return results


def measure(spec: dict) -> list[dict]:
    """`measure_child` in a fresh process with every large allocation mapped on its own."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONPATH=str(REPOSITORY))
    done = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env, capture_output=True,
                          text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"measuring {spec.get('shape') or spec.get('path')} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    args = parse_args()
    if args.child:
        print(json.dumps(measure_child(json.loads(args.child))))
        return
    import tempfile

    from pipeline.config import BUNDLED_MODEL

    scratch = tempfile.mkdtemp(prefix="encoder_memory_")
    points = QUICK_POINTS if args.quick else POINTS
    encoders = [("demo model (6 layers, d_model 144)", {"source": "file", "path": str(BUNDLED_MODEL)}),
                ("parakeet-tdt-0.6b, 1 layer", {"source": "shape", "shape": "parakeet-tdt-0.6b", "layers": 1})]
    if not args.quick:
        encoders.append(("parakeet-rnnt-1.1b, 1 layer", {"source": "shape", "shape": "parakeet-rnnt-1.1b",
                                                          "layers": 1}))
    if args.full_depth:
        encoders.append(("parakeet-tdt-0.6b, 24 layers", {"source": "shape", "shape": "parakeet-tdt-0.6b",
                                                           "layers": None, "points": [("full", 1, 60.0),
                                                                                      ("full", 1, 120.0)]}))
    print("Encoder memory model vs measured peak (CPU, one pass, beyond the weights)\n")
    print("| encoder | attention | rows x seconds | predicted MiB | measured MiB | predicted / measured |")
    print("| --- | --- | --- | --- | --- | --- |")
    figures = []
    for name, spec in encoders:
        spec = {"points": points, **spec, "scratch": scratch, "local_context": args.local_context}
        for row in measure(spec):
            figures.append({"encoder": name, **row})
            print(f"| {name} | {row['attention']} | {row['rows']} x {row['seconds']:g} | "
                  f"{row['predicted_bytes'] / 2**20:.0f} | {row['measured_bytes'] / 2**20:.0f} | {row['ratio']:.2f} |",
                  flush=True)
    ratios = [f["ratio"] for f in figures]
    print(f"\npredicted / measured: {min(ratios):.2f} to {max(ratios):.2f}")
    print(json.dumps({"benchmark": "encoder_memory", "quick": args.quick, "points": figures,
                      "min_ratio": min(ratios), "max_ratio": max(ratios)}))


if __name__ == "__main__":
    main()
