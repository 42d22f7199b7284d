"""A command's wall time and the memory of its whole process tree (the driver and every process under it: a local
Ray's raylet, its workers and actors), sampled, since a job's actors are separate processes that
`/usr/bin/time -v` on the driver does not count.

    .venv/bin/python -m benchmarks.tree_memory [--every-s 0.5] -- python jobs/transcribe.py --model ...

Every `--every-s` seconds it reads each process of the tree's proportional set size (PSS, `/proc/PID/smaps_rollup`:
shared pages split between the processes that map them, so the sum does not count torch's libraries once a
process) and resident set (RSS). Prints the command's exit code, wall seconds, the peak of the tree's summed PSS,
the process with the largest peak RSS (and its command line), and the largest RSS per kind of process, then one
JSON line. The command's own output passes through. A peak between two samples can be missed: a lower bound.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def children_of() -> dict[int, list[int]]:
    """Every process's children, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def tree_of(root: int) -> list[int]:
    children, found, stack = children_of(), [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def memory_of(pid: int) -> tuple[int, int, str] | None:
    """(PSS bytes, RSS bytes, command line) of `pid`, or None if it is gone."""
    try:
        values = {}
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("Pss", "Rss"):
                values[name] = int(rest.split()[0]) * 1024
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        return values["Pss"], values["Rss"], command
    except (OSError, KeyError, ValueError):
        return None


def kind_of(command: str) -> str:
    """A short name for a process of the tree: a Ray worker's role (its title, ray::ActorName), else the program."""
    if command.startswith("ray::"):  # ray::MapWorker(MapBatches(TranscribeBatch)).submit: the actor, not its call
        title = command.split()[0]
        return title[:title.rindex(")") + 1] if ")" in title else title.split(".")[0]
    words = command.split()
    for word in words:
        if word.endswith(".py") or "raylet" in word or "gcs_server" in word:
            return Path(word).name
    return Path(words[0]).name if words else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every-s", type=float, default=0.5)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    started = time.perf_counter()
    process = subprocess.Popen(command)
    peak_pss = 0
    peak_rss_by_kind: dict[str, int] = {}
    largest = (0, "")
    while process.poll() is None:
        total = 0
        for pid in tree_of(process.pid):
            memory = memory_of(pid)
            if memory is None:
                continue
            pss, rss, line = memory
            total += pss
            kind = kind_of(line)
            peak_rss_by_kind[kind] = max(peak_rss_by_kind.get(kind, 0), rss)
            if rss > largest[0]:
                largest = (rss, line)
        peak_pss = max(peak_pss, total)
        time.sleep(args.every_s)
    wall_s = time.perf_counter() - started
    print(f"exit {process.returncode}; wall {wall_s:.1f} s; peak PSS of the process tree {peak_pss / 1e9:.2f} GB; "
          f"largest process RSS {largest[0] / 1e9:.2f} GB ({largest[1][:120]})", file=sys.stderr)
    for kind, rss in sorted(peak_rss_by_kind.items(), key=lambda item: -item[1])[:8]:
        print(f"  peak RSS {rss / 1e9:6.2f} GB  {kind}", file=sys.stderr)
    print(json.dumps({"benchmark": "tree_memory", "command": command, "exit": process.returncode, "wall_s": wall_s,
                      "peak_tree_pss_bytes": peak_pss, "largest_rss_bytes": largest[0],
                      "peak_rss_bytes_by_kind": peak_rss_by_kind}), file=sys.stderr)
    sys.exit(process.returncode)


if __name__ == "__main__":
    main()
