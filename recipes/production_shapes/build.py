"""Build a production-shaped NeMo model with random weights and a calibrated emission rate, as a `.nemo` file.

    python recipes/production_shapes/build.py --shape parakeet-tdt-0.6b --out /tmp/shapes [--layers 4] [--seed 0]

writes /tmp/shapes/parakeet-tdt-0.6b.nemo (with --layers N: parakeet-tdt-0.6b-Nlayers.nemo, every width, the
vocabulary and the durations kept) and the tokenizer folder beside it, and prints one JSON line: the file, its
size, the parameters (also at full depth), the tokenizer (size, cased, punctuation), the calibrated biases and
the seconds each step took. The shapes: recipes/production_shapes/shapes.py; sizes, times and memory:
docs/production_models.md. Needs nemo_toolkit (the `nemo` extra).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for `recipes` and `pipeline`

from recipes.production_shapes.shapes import SHAPES, build_checkpoint, shape_named  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", required=True, choices=sorted(SHAPES))
    parser.add_argument("--out", required=True, type=Path, help="folder for the .nemo file and the tokenizer")
    parser.add_argument("--layers", type=int, default=None,
                        help="encoder layers (default: the shape's own); widths, vocabulary and durations are kept")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.layers is not None and args.layers < 1:
        parser.error(f"--layers must be at least 1, got {args.layers}")
    print(json.dumps(build_checkpoint(shape_named(args.shape, args.layers), args.out, seed=args.seed)))


if __name__ == "__main__":
    main()
