"""`bluedove bench subscribe` end to end on a small cluster: the JSON has its documented shape,
every mode answered subscriptions, and the catalogue holds exactly those answered 201."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_bench_subscribe_smoke():
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "subscribe", "--subs", "500", "--matchers", "2",
                        "--clients", "4", "--batch", "50", "--duration", "1", "--warmup", "0.2", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["kind"] == "subscribe" and set(out["modes"]) == {"concurrent", "sequential", "batch"}
    for mode, m in out["modes"].items():
        assert m["subscriptions"] > 0 and m["subs_per_s"] > 0 and m["errors"] == [], mode
        assert 0 < m["p50_ms"] <= m["p99_ms"] and {"redis", "matchers", "dispatcher"} <= set(m["cpu_pct"])
        assert set(m["cpu_ms_per_sub"]) == set(m["cpu_pct"])
    assert out["modes"]["batch"]["subscriptions"] % 50 == 0
    assert out["catalogued"] == out["answered"] > 0 and out["ok"] is True
