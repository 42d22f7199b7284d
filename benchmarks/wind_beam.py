"""WIND beam search against ALSD++ and AES++ on the bundled model and domain test set: WER and decode time at
beams 2, 4 and 8, without and with the domain LM.

The bundled RNN-T (`models/demo_hybrid_rnnt_ctc.nemo`) encodes `samples/domain/test.json` once; each search then
decodes the encoder output (decoder only, batches of `--batch-size` utterances sorted by length, as
`benchmarks/accuracy.py` does), eagerly on the CPU. The searches:
- `alsd`: ALSD++ (`decoders/transducer/beam.py`);
- `aes`: AES++ (`decoders/transducer/aes.py`);
- `aes_skip`: AES++ that moves over blank-only frames with a windowed joint call (`AesSkipBlankSearch`, the
  project's earlier "wind_beam"; same results as AES++ by test, so only its time is new);
- `wind`: the WIND paper's beam search (`decoders/transducer/wind_beam.py`), window `--window`, with mAES's
  pruning by value of each hypothesis's window entries (`expansion_gamma` 2.3, as AES++), its default;
- `wind_topk`: the same with `expansion_gamma` infinite: each hypothesis's K best window entries, nothing
  pruned by value: the paper's step taken literally.
Without the LM every search runs at each beam; with the domain LM (the 6-gram token LM of
`benchmarks/accuracy.py`, built from `samples/domain/lm_text.txt` with `jobs/build_lm.py`) each search runs at a
fixed LM weight (`--lm-weights`; the defaults are each search's pick on dev at beam 4 by `--pick-weights`, which
for ALSD++ and AES++ are also `benchmarks/accuracy.py`'s picks).
Times are interleaved: per beam and LM setting, one round decodes the whole set with every search, in an order
that rotates each round; the median of `--repeats` rounds after a warm-up round is reported, with "x alsd 2" =
that time / ALSD++'s time at beam 2 with the same LM setting. The paper's claim (Xu et al., 2025: WIND beam at
beam 4 faster than ALSD and mAES at beam 2, at the best or a tied WER) is checked on these figures and stated.

    python benchmarks/wind_beam.py                  # beams 2, 4, 8; 3 rounds
    python benchmarks/wind_beam.py --quick          # beams 2 and 4, first 40 test utterances, 1 round: under a minute
    python benchmarks/wind_beam.py --pick-weights   # also choose each search's LM weight on dev (beam 4)

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning threads

import torch  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from benchmarks._timing import interleaved_ms, machine  # noqa: E402
from benchmarks.accuracy import read_set  # noqa: E402
from decoders.ngram import NgramLm  # noqa: E402
from decoders.transducer import (  # noqa: E402  # noqa: E402
    AesBeamSearch,
    AesSkipBlankSearch,
    AlsdBeamSearch,
    BeamSearchConfig,
    WindBeamSearch,  # noqa: E402
)
from pipeline.config import BUNDLED_MODEL  # noqa: E402
from pipeline.lm import (  # noqa: E402
    EncodedSet,
    build_lm,  # noqa: E402
    score,
)
from pipeline.model import load_asr_model  # noqa: E402

# name -> (search, settings beyond the beam, window and LM weight)
SEARCHES = {
    "alsd": (AlsdBeamSearch, {}),
    "aes": (AesBeamSearch, {}),
    "aes_skip": (AesSkipBlankSearch, {}),
    "wind": (WindBeamSearch, {}),
    "wind_topk": (WindBeamSearch, {"expansion_gamma": float("inf")}),
}
NAMES = {"alsd": "ALSD++", "aes": "AES++", "aes_skip": "AES++ with skipping", "wind": "WIND beam",
         "wind_topk": "WIND beam, top-K only"}
# LM weights at beam 4 picked on dev by `python benchmarks/wind_beam.py --pick-weights` (PICK_GRID)
LM_WEIGHTS = {"alsd": 2.0, "aes": 1.2, "aes_skip": 1.2, "wind": 1.0, "wind_topk": 2.0}
PICK_GRID = (0.6, 1.0, 1.2, 1.5, 2.0)


def first_rows(manifest: Path, count: int, folder: Path) -> Path:
    """A manifest in `folder` of the first `count` rows of `manifest`, with absolute audio paths."""
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()][:count]
    for row in rows:
        row["audio_filepath"] = str((manifest.parent / row["audio_filepath"]).resolve())
    path = folder / manifest.name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def decode_set(decoder, model, encoded: EncodedSet) -> list[str]:
    texts = [""] * len(encoded.references)
    with torch.no_grad():
        for output, lengths, rows in encoded.batches:
            for row, hypothesis in zip(rows, decoder(output, lengths).to_list()):
                texts[row] = model.tokenizer.ids_to_text(hypothesis.tokens)
    return texts


def build(name: str, model, beam_size: int, window: int, lm: NgramLm | None, lm_weight: float):
    search, settings = SEARCHES[name]
    config = BeamSearchConfig(beam_size=beam_size, window_size=window, lm_weight=lm_weight if lm else 0.0, **settings)
    return search(model.transducer, config, lm)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="beams 2 and 4, the first 40 test utterances, 1 round")
    parser.add_argument("--model", default=str(BUNDLED_MODEL))
    parser.add_argument("--domain", default=str(REPOSITORY / "samples" / "domain"))
    parser.add_argument("--order", type=int, default=6, help="n-gram order of the domain LM (tokens)")
    parser.add_argument("--beams", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--window", type=int, default=8, help="WIND window W (wind and aes_skip)")
    parser.add_argument("--searches", nargs="+", default=list(SEARCHES), choices=list(SEARCHES))
    parser.add_argument("--lm-weights", type=float, nargs="+",
                        help=f"LM weight of each search in --searches order (default {LM_WEIGHTS})")
    parser.add_argument("--pick-weights", action="store_true",
                        help=f"choose each search's LM weight on dev at beam 4 from {PICK_GRID} (by WER, then CER)")
    parser.add_argument("--utterances", type=int, help="decode only the first N test utterances")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.quick:
        args.beams, args.repeats, args.utterances = [2, 4], 1, args.utterances or 40
    torch.set_num_threads(args.threads)
    weights = dict(LM_WEIGHTS)
    if args.lm_weights:
        weights.update(zip(args.searches, args.lm_weights))
    domain = Path(args.domain)

    model = load_asr_model(args.model)
    with tempfile.TemporaryDirectory() as scratch:
        test_manifest = domain / "test.json"
        if args.utterances:
            test_manifest = first_rows(test_manifest, args.utterances, Path(scratch))
        test = read_set(test_manifest, args.batch_size, model)
        dev = read_set(domain / "dev.json", args.batch_size, model) if args.pick_weights else None
        lm_path = str(Path(scratch) / "domain.lm")
        build_lm([domain / "lm_text.txt"], args.model, lm_path, order=args.order)
        lm = NgramLm.load(lm_path)

        picks = {}
        if args.pick_weights:
            for name in args.searches:
                measured = {w: score(dev.references, decode_set(build(name, model, 4, args.window, lm, w), model, dev))
                            for w in PICK_GRID}
                weights[name] = min(PICK_GRID, key=lambda w: (measured[w].wer, measured[w].cer, w))
                picks[name] = {f"{w:g}": round(m.wer, 4) for w, m in measured.items()}
                print(f"  {name}: dev WER by LM weight {picks[name]} -> {weights[name]:g}", flush=True)

        rows = []
        for with_lm in (False, True):
            for beam_size in args.beams:
                decoders = {name: build(name, model, beam_size, args.window, lm if with_lm else None, weights[name])
                            for name in args.searches}
                runs = {name: (lambda d=decoder: decode_set(d, model, test)) for name, decoder in decoders.items()}
                times, texts = interleaved_ms(runs, args.repeats)
                for name in args.searches:
                    measured = score(test.references, texts[name])
                    rows.append({"search": name, "beam_size": beam_size, "lm_weight": weights[name] if with_lm else 0.0,
                                 "wer": measured.wer, "cer": measured.cer, "ms": statistics.median(times[name])})
                    print(f"  {'LM' if with_lm else 'no LM'} beam {beam_size} {name}: WER {measured.wer:.2%}, "
                          f"{rows[-1]['ms']:.0f} ms", flush=True)

    def find(search: str, beam: int, with_lm: bool) -> dict | None:
        return next((r for r in rows if r["search"] == search and r["beam_size"] == beam
                     and (r["lm_weight"] > 0) == with_lm), None)

    for row in rows:
        base = find("alsd", 2, row["lm_weight"] > 0)
        row["x_alsd_2"] = row["ms"] / base["ms"] if base else None

    print(f"\nmodel {Path(args.model).name}, {len(test.references)} test utterances ({test.audio_s:.0f} s of audio), "
          f"batches of {args.batch_size}, decoder only, eager on the CPU, {torch.get_num_threads()} thread(s); "
          f"WIND window {args.window}; median of {args.repeats} interleaved round(s); "
          f"LM weights {', '.join(f'{n} {weights[n]:g}' for n in args.searches)}")
    print("| LM | search | " + " | ".join(f"beam {b}: WER, ms (x alsd 2)" for b in args.beams) + " |")
    print("|---|---|" + "---|" * len(args.beams))
    for with_lm in (False, True):
        for name in args.searches:
            cells = []
            for beam in args.beams:
                r = find(name, beam, with_lm)
                cells.append(f"{r['wer']:.1%}, {r['ms']:.0f} ({r['x_alsd_2']:.2f})")
            label = f"weight {weights[name]:g}" if with_lm else "none"
            print(f"| {label} | {NAMES[name]} | " + " | ".join(cells) + " |")

    claims = {}
    if {"alsd", "aes"} <= set(args.searches) and {2, 4} <= set(args.beams):
        for variant in [name for name in ("wind", "wind_topk") if name in args.searches]:
            for with_lm in (False, True):
                wind = find(variant, 4, with_lm)
                peers = [find(name, 2, with_lm) for name in ("alsd", "aes")]
                faster = all(wind["ms"] < p["ms"] for p in peers)
                as_good = all(wind["wer"] <= p["wer"] for p in peers)
                claims[f"{variant}, {'LM' if with_lm else 'no LM'}"] = {
                    "faster": faster, "wer_equal_or_better": as_good, "holds": faster and as_good}
                peer_ms = " and ".join(f"{p['ms']:.0f}" for p in peers)
                peer_wer = " and ".join(f"{p['wer']:.1%}" for p in peers)
                print(f"claim, {'with' if with_lm else 'without'} the LM: {NAMES[variant]} at beam 4 "
                      f"{'faster' if faster else 'not faster'} than ALSD++ and AES++ at beam 2 "
                      f"({wind['ms']:.0f} ms vs {peer_ms}), WER {wind['wer']:.1%} vs {peer_wer}: "
                      f"{'holds' if faster and as_good else 'does not hold'}")
    command = ("python benchmarks/wind_beam.py " + " ".join(sys.argv[1:])).strip()
    print(f"reproduce: {command}")
    print(json.dumps({"benchmark": "wind_beam", "command": command, **machine("cpu"),
                      "model": Path(args.model).name, "test_utterances": len(test.references),
                      "window": args.window, "lm_weights": {n: weights[n] for n in args.searches},
                      "dev_wer_by_weight": picks or None, "rows": rows, "claim": claims or None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
