"""Loading a production-size model on a node: the fetch from remote storage, a second actor's cache hit, the hash,
and the restore an ASR actor makes, in seconds and resident memory (docs/production_models.md).

    .venv/bin/python -m benchmarks.model_loading                  # /tmp/shapes/parakeet-tdt-0.6b.nemo (2.48 GB)
    .venv/bin/python -m benchmarks.model_loading --quick          # a 1-layer build of the same shape (~15 s more)
    .venv/bin/python -m benchmarks.model_loading --model other.nemo

The model file is served over plain http on 127.0.0.1 from disk (Python's `http.server`, in this process: a
`Last-Modified` header, so the fetch store keeps it by version) and each step runs in a fresh process, as an actor
starts, so that its peak resident memory is its own (VmHWM):

1. fetch: `pipeline.io.fetch_file` of the http URL into an empty node cache: the first actor of a node downloads
   it (streamed to disk while hashed; over loopback, so this is the client's cost, not a network's).
2. fetch again: the second actor of the node: a HEAD request and the cache's ref, no download.
3. hash, hash again: `pipeline.model.actor.model_sha256` of the local file (a model given by path): the first
   asker hashes it, every later one on the node reads the digest kept for that version of the file.
4. restore: `pipeline.model.actor.load_model`, what an ASR actor runs when it starts (the fetch, a cache hit, then
   NeMo's restore of the `.nemo` on the CPU): seconds, peak RSS, and the RSS once loaded (what the actor keeps),
   and after glibc's `malloc_trim(0)` (the heap that held the model's first, random weights, freed but kept).

Import times (NeMo's, torch's) are given apart from each step's. Prints a table, the command that reproduces it,
and one JSON line with every figure. The full-size model: `python recipes/production_shapes/build.py --shape
parakeet-tdt-0.6b --out /tmp/shapes` (30 s, 3.5 GB); a step needs up to 6 GB of free memory.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import gc
import json
import subprocess
import sys
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parents[1]
FULL_MODEL = Path("/tmp/shapes/parakeet-tdt-0.6b.nemo")
BUILD_COMMAND = "python recipes/production_shapes/build.py --shape parakeet-tdt-0.6b --out /tmp/shapes"


def resident_bytes() -> int:
    """This process's resident memory now (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def peak_resident_bytes() -> int:
    """This process's peak resident memory (VmHWM: `ru_maxrss` would carry over the parent's from before exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def run_step(step: str, uri: str, cache_dir: str) -> dict[str, Any]:
    """One step in this process (a fresh one: `--step`): {"seconds", "import_s", "peak_rss_bytes", ...}."""
    sys.path.insert(0, str(REPOSITORY))
    began = time.perf_counter()
    from pipeline.config import ModelConfig
    from pipeline.io import fetch_file, models_dir

    model = ModelConfig(uri=uri, cache_dir=cache_dir)
    if step == "restore":
        import nemo.collections.asr  # noqa: F401  (NeMo's import, apart from the restore)

        from pipeline.model.actor import load_model
    elif step == "hash":
        from pipeline.model.actor import model_sha256
    imported = time.perf_counter()
    result: dict[str, Any] = {}
    if step == "fetch":
        path = fetch_file(uri, cache_dir=models_dir(cache_dir))
        result["path"] = str(path)
    elif step == "hash":
        result["sha256"] = model_sha256(model)
    elif step == "restore":
        loaded = load_model(model, "cpu")
        result["parameters"] = sum(p.numel() for p in loaded.nemo_model.parameters())
    else:
        raise ValueError(f"unknown step {step!r}")
    done = time.perf_counter()
    gc.collect()
    result.update(seconds=done - imported, import_s=imported - began, peak_rss_bytes=peak_resident_bytes(),
                  rss_after_bytes=resident_bytes())
    # what of it is heap glibc keeps after NeMo freed it (the random weights the checkpoint's replaced)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    result["rss_after_trim_bytes"] = resident_bytes()
    return result


def in_fresh_process(step: str, uri: str, cache_dir: Path) -> dict[str, Any]:
    """`run_step` in a new Python process (its own peak RSS), as an actor starting on the node."""
    command = [sys.executable, str(Path(__file__).resolve()), "--step", step, "--uri", uri, "--cache-dir",
               str(cache_dir)]
    finished = subprocess.run(command, capture_output=True, text=True, cwd=REPOSITORY)
    if finished.returncode != 0:
        raise SystemExit(f"step {step} failed (exit {finished.returncode}):\n{finished.stderr[-4000:]}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


def served(folder: Path) -> tuple[ThreadingHTTPServer, str]:
    """`folder` served over plain http on 127.0.0.1 (a free port), from disk; -> (server, base URL)."""

    class QuietHandler(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(folder)))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def quick_model(folder: Path) -> Path:
    """The parakeet-tdt-0.6b shape at 1 encoder layer (every width, the vocabulary and durations kept), built into
    `folder`."""
    command = [sys.executable, "recipes/production_shapes/build.py", "--shape", "parakeet-tdt-0.6b", "--layers", "1",
               "--out", str(folder)]
    finished = subprocess.run(command, capture_output=True, text=True, cwd=REPOSITORY)
    if finished.returncode != 0:
        raise SystemExit(f"building the quick model failed:\n{finished.stderr[-4000:]}")
    return Path(json.loads(finished.stdout.strip().splitlines()[-1])["path"])


def gb(count: int) -> str:
    return f"{count / 1e9:.2f} GB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help=f"a .nemo file (default {FULL_MODEL}; --quick: a 1-layer build)")
    parser.add_argument("--quick", action="store_true", help="a 1-layer model of the same shape, built here")
    parser.add_argument("--step", choices=["fetch", "hash", "restore"], help=argparse.SUPPRESS)  # a fresh process's
    parser.add_argument("--uri", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        print(json.dumps(run_step(args.step, args.uri, args.cache_dir)))
        return

    sys.path.insert(0, str(REPOSITORY))
    from benchmarks._timing import machine

    with tempfile.TemporaryDirectory(prefix="model-loading-") as scratch:
        scratch = Path(scratch)
        model = args.model or (quick_model(scratch / "model") if args.quick else FULL_MODEL)
        if not model.is_file():
            raise SystemExit(f"no model at {model}: build it with `{BUILD_COMMAND}`, or pass --model or --quick")
        model, size = model.resolve(), model.stat().st_size
        server, url = served(model.parent)
        try:
            uri = f"{url}/{model.name}"
            steps = [("fetch (first actor of the node: downloads)", "fetch", uri, scratch / "remote"),
                     ("fetch again (second actor: cache hit)", "fetch", uri, scratch / "remote"),
                     ("hash the local file (first asker)", "hash", str(model), scratch / "local"),
                     ("hash again (second asker: kept digest)", "hash", str(model), scratch / "local"),
                     ("restore in an ASR actor (fetch hit + NeMo restore)", "restore", uri, scratch / "remote")]
            rows = [(label, step, in_fresh_process(step, step_uri, cache)) for label, step, step_uri, cache in steps]
        finally:
            server.shutdown()
            server.server_close()

    print(f"model {model} ({gb(size)})")
    print(f"{'step':52} {'seconds':>8} {'imports s':>9} {'peak RSS':>9} {'RSS after':>9} {'trimmed':>9}")
    for label, _, result in rows:
        print(f"{label:52} {result['seconds']:8.2f} {result['import_s']:9.2f} {gb(result['peak_rss_bytes']):>9} "
              f"{gb(result['rss_after_bytes']):>9} {gb(result['rss_after_trim_bytes']):>9}")
    first = rows[0][2]
    print(f"download rate {size / first['seconds'] / 1e6:.0f} MB/s over loopback; parameters "
          f"{rows[-1][2]['parameters'] / 1e6:.1f} M")
    reproduce = "python -m benchmarks.model_loading" + (" --quick" if args.quick else "") + (
        f" --model {args.model}" if args.model else "")
    print(f"reproduce: .venv/bin/{reproduce}")
    print(json.dumps({"benchmark": "model_loading", "quick": args.quick, "model": str(model), "bytes": size,
                      "machine": machine(), "steps": [{"step": label, **result} for label, _, result in rows]}))


if __name__ == "__main__":
    main()
