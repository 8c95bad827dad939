"""Where an idle matcher's and dispatcher's resident memory goes.

Starts `bluedove up --matchers 1` in a temporary folder, waits until it is ready and a few
seconds more, then prints each process's resident set (anonymous and file-backed) and its
largest mappings from /proc/PID/smaps, and stops the cluster. Linux only.

    python scripts/idle_memory.py [--settle 10] [--top 8]
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

PROCESS = re.compile(r"^\s+(matcher|dispatcher)\s+(\S+)\s+pid (\d+)")


def mappings(pid: int) -> dict[str, int]:
    """KiB resident per mapped file ([anon] and [heap] for memory no file backs)."""
    out: dict[str, int] = defaultdict(int)
    name = "[anon]"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and "-" in fields[0] and ":" in fields[3]:
            name = fields[5] if len(fields) > 5 else "[anon]"
        elif fields and fields[0] == "Rss:":
            out[name] += int(fields[1])
    return out


def status(pid: int) -> dict[str, int]:
    keep = ("VmRSS", "RssAnon", "RssFile", "Threads")
    return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in
            Path(f"/proc/{pid}/status").read_text().splitlines()) if k in keep}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--settle", type=float, default=10.0, help="seconds to wait after ready (default 10)")
    p.add_argument("--top", type=int, default=8, help="mappings to list per process (default 8)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        up = subprocess.Popen([sys.executable, "-m", "bluedove", "up", "--matchers", "1", "--http-port", "0",
                               "--grpc-port", "0", "--data-dir", tmp], stdout=subprocess.PIPE, text=True)
        procs = []
        try:
            for line in up.stdout:
                if m := PROCESS.match(line):
                    procs.append((m.group(1), m.group(2), int(m.group(3))))
                if line.startswith("ready"):
                    break
            time.sleep(args.settle)
            for role, name, pid in procs:
                st = status(pid)
                print(f"{role} {name}: resident {st['VmRSS'] / 1024:.0f} MiB (anonymous {st['RssAnon'] / 1024:.0f}, "
                      f"file-backed {st['RssFile'] / 1024:.0f}), {st['Threads']} threads")
                for path, kib in sorted(mappings(pid).items(), key=lambda x: -x[1])[:args.top]:
                    print(f"  {kib / 1024:6.1f} MiB  {path.rsplit('/', 1)[-1]}")
        finally:
            up.send_signal(signal.SIGINT)
            up.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
