"""`bluedove bench subscribe` end to end on a small cluster: the JSON has its documented shape,
every mode answered subscriptions, the catalogue holds exactly those answered 201, and the churn
mode published alone and beside subscribes and unsubscribes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.lab]


def test_bench_subscribe_smoke():
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "subscribe", "--subs", "500", "--matchers", "2",
                        "--clients", "4", "--batch", "50", "--duration", "1", "--warmup", "0.2", "--json",
                        "--modes", "concurrent,sequential,batch,churn", "--churn", "50"],
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
    churn = out["churn"]
    assert churn["saturation_per_s"] > 0 and churn["rate_per_s"] == pytest.approx(churn["saturation_per_s"] / 2, abs=1)
    assert churn["alone"]["accepted_per_s"] > 0 and churn["with_churn"]["accepted_per_s"] > 0
    assert churn["churn"]["subscribed_per_s"] > 0 and churn["churn"]["errors"] == []
