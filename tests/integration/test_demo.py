"""`bluedove demo` as a real subprocess: exact delivery reported, exit 0, nothing left running."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


def _alive(pid: int) -> bool:
    """True if pid still runs a bluedove or redis-server process (a reused pid is not ours)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        state = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                     if line.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return ("bluedove" in cmdline or "redis-server" in cmdline) and "zombie" not in state


def _field(out: str, name: str) -> int:
    m = re.search(rf"^\s*{name}\s+(\d+)", out, re.MULTILINE)
    assert m, f"no '{name}' in the summary:\n{out}"
    return int(m.group(1))


@pytest.mark.integration
def test_demo_delivers_exactly_and_leaves_nothing_behind():
    proc = subprocess.run(
        [sys.executable, "-m", "bluedove", "demo", "--duration", "5", "--drivers", "50", "--rate", "100"],
        capture_output=True, text=True, timeout=180)
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{proc.stderr}"

    assert "result: exact delivery" in out, out
    assert _field(out, "messages published") == 500
    delivered = _field(out, "delivered")
    assert delivered > 0
    assert _field(out, "deliveries expected") == delivered
    for name in ("missing", "duplicates", "unexpected", "wrong subscription lists", "publishes failed"):
        assert _field(out, name) == 0, name
    assert re.search(r"latency p50/p95/p99/max\s+\d+ms / \d+ms / \d+ms / \d+ms", out), out
    # the latency split at the store write, the client's share named apart
    for stage in ("published→stored", "stored→poller", "waited for the poller"):
        assert re.search(rf"^\s+{stage}\s+-?[\d.]+ms / -?[\d.]+ms / -?[\d.]+ms", out, re.MULTILINE), out
    assert len(re.findall(r"^\s+m\d+\s+\d+\s+\d+\s+\d+$", out, re.MULTILINE)) == 4, out  # per-matcher rows

    started = re.search(r"^processes: (.*)$", out, re.MULTILINE)
    assert started, out
    pids = {name: int(pid) for name, pid in re.findall(r"(\S+)=(\d+)", started.group(1))}
    assert {"redis-server", "m1", "m2", "m3", "m4", "d1"} <= set(pids)
    left = {name: pid for name, pid in pids.items() if _alive(pid)}
    assert not left, f"left running: {left}"

    data_dir = re.search(r"data in (\S+)", out)
    assert data_dir and not Path(data_dir.group(1)).exists(), "the temporary data folder was not removed"
