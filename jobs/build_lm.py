"""Build a token-level n-gram LM from word-level domain text: text -> SentencePiece tokens -> ARPA -> binary.

    python jobs/build_lm.py --tokenizer tokenizer.model --text domain.txt --output domain.lm
    python jobs/build_lm.py --tokenizer model.nemo --text domain.txt --output domain.lm
    python jobs/build_lm.py --tokenizer tokenizer.model --text a.txt b.txt.gz --order 8 \\
        --heldout dev.txt --arpa domain.arpa --tool varikn --output domain.lm

Each line of text is a sentence. The ARPA file comes from KenLM's `lmplz` when it is on PATH, else from `varikn`
(pip), normalized into the strict form KenLM accepts; the binary is what decoders load (`pipeline/lm/build.py`
says how). Reports n-gram counts and perplexity on held-out text (`--heldout`, or every 20th line of the text
with `--heldout-every 20`, held out of training).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.lm import MAX_ORDER, build_lm, format_report  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text", nargs="+", required=True,
                        help="training text files (plain or gzip), a sentence a line")
    parser.add_argument("--tokenizer", required=True,
                        help="SentencePiece model: the ASR model's tokenizer.model, or its .nemo file")
    parser.add_argument("--output", required=True, help="binary LM to write")
    parser.add_argument("--order", type=int, default=6, help=f"n-gram order, 1..{MAX_ORDER} (default 6)")
    parser.add_argument("--heldout", nargs="*", default=(), help="held-out text files for perplexity")
    parser.add_argument("--heldout-every", type=int, default=0,
                        help="hold out every k-th training line for perplexity (0: none)")
    parser.add_argument("--arpa", help="also keep the normalized token-level ARPA file here")
    parser.add_argument("--tool", choices=("auto", "lmplz", "varikn"), default="auto",
                        help="auto: lmplz if on PATH, else varikn")
    parser.add_argument("--varikn-scale", type=float, default=0.001,
                        help="varikn data-cost scale D (smaller grows a larger model)")
    parser.add_argument("--work-dir", help="where temporary files go (default: the system's)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    report = build_lm(args.text, args.tokenizer, args.output, order=args.order, heldout=args.heldout,
                      heldout_every=args.heldout_every, arpa=args.arpa, tool=args.tool,
                      varikn_scale=args.varikn_scale, work_dir=args.work_dir)
    print(json.dumps(asdict(report)) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
