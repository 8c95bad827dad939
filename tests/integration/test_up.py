"""`bluedove up` as a user runs it: prints its addresses, serves, and on SIGTERM stops every
process it started — promptly, even with long-polls open — leaving none behind."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from bluedove.store.server import free_port

pytestmark = pytest.mark.integration


def test_up_serves_then_stops_cleanly_with_polls_open(tmp_path):
    port, grpc_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bluedove", "up", "--matchers", "2", "--dispatchers", "2",
                             "--http-port", str(port), "--grpc-port", str(grpc_port), "--data-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ready"):
                break
        out = "".join(lines)
        assert f"REST API    http://127.0.0.1:{port}" in out, out
        assert f"gRPC API    127.0.0.1:{grpc_port}" in out, out
        pids = [int(p) for p in re.findall(r"pid (\d+)", out)]
        assert len(pids) == 4, out  # 2 matchers + 2 dispatchers, each its own process
        # /proc, not ps: ps cuts arguments to the terminal width, which CI does not have.
        cmdlines = [open(f"/proc/{pid}/cmdline").read().replace("\0", " ") for pid in pids]
        assert any("matcher --id m1" in c for c in cmdlines), cmdlines
        assert any("dispatcher --id d2" in c for c in cmdlines), cmdlines

        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        sub = api.post("/v1/subscriptions", json={"predicates": {}}).json()
        auth = {"Authorization": f"Bearer {sub['token']}"}
        results = []

        def long_poll():
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
                try:
                    results.append(c.get(f"/v1/queues/{sub['queue']}/messages", params={"wait": 20}, headers=auth))
                except httpx.TransportError as exc:
                    results.append(exc)

        polls = [threading.Thread(target=long_poll) for _ in range(4)]
        for t in polls:
            t.start()
        time.sleep(1.0)

        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[0]
        stop_s = time.monotonic() - t0
        assert proc.returncode == 0, rest
        assert "stopped" in rest
        for t in polls:
            t.join(5)
        # Open long-polls were answered (empty), not cut off after a grace period.
        assert [getattr(r, "status_code", r) for r in results] == [200] * 4
        assert all(r.json() == {"messages": []} for r in results)
        assert stop_s < 5, f"stopping took {stop_s:.1f}s"
        alive = subprocess.run(["ps", "-o", "pid=", "-p", ",".join(map(str, pids))], capture_output=True, text=True)
        assert alive.stdout.strip() == "", "a child outlived `bluedove up`"
        everything = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True).stdout
        assert str(tmp_path) not in everything, "the embedded redis-server outlived `bluedove up`"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
