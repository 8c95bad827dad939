"""`bluedove up` as a user runs it: prints its addresses, serves, and on SIGTERM stops every
process it started — promptly, even with long-polls open — leaving none behind."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

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
        assert f"dashboard   http://127.0.0.1:{port}/dashboard" in out, out
        pids = [int(p) for p in re.findall(r"pid (\d+)", out)]
        assert len(pids) == 4, out  # 2 matchers + 2 dispatchers, each its own process
        # /proc, not ps: ps cuts arguments to the terminal width, which CI does not have.
        cmdlines = [Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ") for pid in pids]
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


@pytest.mark.parametrize("text, says", [
    ("dimensions:\n  - {name: lon, min: 0, max: x}\n", "dimensions[0].max: expected a finite number, got 'x'"),
    ("dimensions:\n  - {name: lon, min: 0, max: 1, unit: deg}\n", "dimensions[0].unit: unknown key"),
    ("dimensions: [\n", "while parsing"),
    (None, "No such file"),
])
def test_up_with_a_bad_space_file_is_a_clear_error_and_starts_nothing(tmp_path, text, says):
    space = tmp_path / "space.yaml"
    if text is not None:
        space.write_text(text)
    data = tmp_path / "data"
    proc = subprocess.run([sys.executable, "-m", "bluedove", "up", "--space", str(space), "--http-port", "0",
                           "--grpc-port", "0", "--data-dir", str(data)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"bluedove up: --space {space}: "), proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not data.exists()  # checked before anything started: no store, no process


@pytest.mark.parametrize("flag", ["--http-port", "--grpc-port"])
def test_up_refuses_a_port_another_cluster_listens_on(tmp_path, flag):
    """Dispatchers listen with SO_REUSEPORT (to share one port among themselves): a second
    `up` on a taken port used to join it silently, and the kernel split clients between two
    unrelated clusters. It must refuse before starting anything."""
    from bluedove.dispatcher.server import listen_socket

    taken = listen_socket("127.0.0.1", 0)  # as a running dispatcher listens
    port = taken.getsockname()[1]
    ports = {"--http-port": str(free_port()), "--grpc-port": str(free_port()), flag: str(port)}
    data = tmp_path / "data"
    flags = [x for kv in ports.items() for x in kv]
    proc = subprocess.Popen([sys.executable, "-m", "bluedove", "up", "--matchers", "1", *flags,
                             "--data-dir", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # (the bug: it started; stop it cleanly, then fail)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        taken.close()
    assert proc.returncode == 1, out + err
    assert err.strip() == f"bluedove up: {flag} {port}: 127.0.0.1:{port} is already in use (another cluster?)", err
    assert not data.exists()
