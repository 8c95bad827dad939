"""`bluedove up --auth keys` as a user runs it: it says auth is on and, on a store without keys,
prints a first admin key that works; started again on the same store it makes no other; and
without the flag it says auth is off and publishing needs no key."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import httpx
import pytest

from bluedove.store.server import free_port
from tests.integration.helpers import output_until_ready, stop_up

pytestmark = pytest.mark.integration
KEY = re.compile(r"^\s*(bdk_[0-9a-f]{16}_[A-Za-z0-9_-]{43})$", re.MULTILINE)


def up(data_dir, *flags: str, env: dict | None = None) -> tuple[subprocess.Popen, str, str]:
    """A `bluedove up` until it is ready: (process, its output so far, REST URL)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bluedove", "up", "--matchers", "1", "--http-port", str(port),
                             "--grpc-port", str(free_port()), "--data-dir", str(data_dir), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})
    out = output_until_ready(proc)
    if not out.rstrip().endswith("ready; Ctrl-C stops every process"):
        stop_up(proc, data_dir)
        pytest.fail(f"bluedove up did not get ready:\n{out}")
    return proc, out, f"http://127.0.0.1:{port}"


def test_up_with_keys_prints_a_first_admin_key_once_and_without_says_off(tmp_path):
    proc, out, url = up(tmp_path, "--auth", "keys")
    try:
        assert "auth: keys" in out, out
        keys = KEY.findall(out)
        assert len(keys) == 1, out
        assert httpx.post(f"{url}/v1/queues").status_code == 401
        r = httpx.post(f"{url}/v1/queues", headers={"Authorization": f"Bearer {keys[0]}"})
        assert r.status_code == 201, r.text
    finally:
        stop_up(proc, tmp_path)

    # Again on the same store, keys on by the environment: no second key; the first still works.
    proc, out, url = up(tmp_path, env={"BLUEDOVE_AUTH": "keys"})
    try:
        assert "auth: keys" in out and not KEY.findall(out), out
        assert httpx.post(f"{url}/v1/queues", headers={"Authorization": f"Bearer {keys[0]}"}).status_code == 201
    finally:
        stop_up(proc, tmp_path)

    proc, out, url = up(tmp_path, env={"BLUEDOVE_AUTH": "off"})
    try:
        assert "auth: off" in out and not KEY.findall(out), out
        assert httpx.post(f"{url}/v1/queues").status_code == 201
    finally:
        stop_up(proc, tmp_path)
