"""`bluedove demo --workload orders` as a real subprocess: the typed space served, exact delivery
against the core's exact check reported, exit 0, nothing left running."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.integration.test_demo import _alive, _field

pytestmark = pytest.mark.integration


def test_demo_orders_delivers_exactly_and_leaves_nothing_behind():
    proc = subprocess.run(
        [sys.executable, "-m", "bluedove", "demo", "--workload", "orders", "--duration", "3", "--rate", "100",
         "--drivers", "40"],
        capture_output=True, text=True, timeout=180)
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{proc.stderr}"

    assert re.search(r"^40 subscribers subscribed \(120 subscriptions\) .* publishing 300 orders", out,
                     re.MULTILINE), out
    assert re.search(r"^\s+[\d.]+s order \d+/300 ", out, re.MULTILINE), out  # the progress line
    assert "result: exact delivery" in out, out
    assert _field(out, "messages published") == 300
    delivered = _field(out, "delivered")
    assert delivered > 300  # an order reaches several queues
    assert _field(out, "deliveries expected") == delivered
    for name in ("missing", "duplicates", "unexpected", "wrong subscription lists", "publishes failed"):
        assert _field(out, name) == 0, name

    started = re.search(r"^processes: (.*)$", out, re.MULTILINE)
    assert started, out
    pids = {name: int(pid) for name, pid in re.findall(r"(\S+)=(\d+)", started.group(1))}
    assert {"redis-server", "m1", "m2", "m3", "m4", "d1"} <= set(pids)
    assert not {name: pid for name, pid in pids.items() if _alive(pid)}


def test_demo_orders_refuses_another_space(tmp_path):
    (tmp_path / "space.yaml").write_text("dimensions: [{name: x, min: 0, max: 1}]\n")
    proc = subprocess.run([sys.executable, "-m", "bluedove", "demo", "--workload", "orders", "--space",
                           str(tmp_path / "space.yaml")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "the demo needs the orders space" in proc.stderr and "partition:" in proc.stderr, proc.stderr
