"""`bluedove bench isolation` on a real small cluster, one short round: the steady space is
served in every window, the flooded one is held to its quota (its refusals answered 429), each
space spans the matchers asked for, placed apart, and the figures are shaped as documented. No
timed thresholds: the latency ratios are the bench's to report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.lab]

# The flood offered at 10x its quota: past it even where a slow machine's one flooder sends at a
# fraction of the rate asked. Few requests (a steady 20/s, batches of 40): on a machine loaded
# ~4x, 50 steady publishes/s and batches of 20 stretched the steady calls to seconds even alone.
TINY = ["--subs", "100", "--matchers", "2", "--spans", "1", "--rate", "20", "--quota", "200", "--flood-rate", "2000",
        "--batch", "40", "--flooders", "1", "--window", "2", "--rounds", "1", "--json"]


def test_a_round_holds_the_flooded_space_to_its_quota_and_serves_the_steady_one():
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "isolation", *TINY],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]  # 1 when a steady publish failed
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # one matcher each, and two idle matchers at creation: apart, by the spaces' names
    assert sorted(len(m) for m in out["spans"].values()) == [1, 1]
    assert out["spans"]["steady"] != out["spans"]["flood"], out["spans"]
    (rnd,) = out["rounds"]
    for key in ("alone", "at_quota", "flood"):
        w = rnd[key]
        assert w["sent"] > 0 and not w["errors"] and w["p50_ms"] <= w["p99_ms"] <= w["max_ms"], w
    past = rnd["flood_flooded"]
    assert past["refused_429"] > 0 and past["other_errors"] == 0
    # its bucket's burst was taken in the second before the window (--settle 1): in the window,
    # the quota, and a batch more at most (counted by answer time)
    assert 0 < past["accepted_per_s"] <= 200 * 1.1, past
    burst = rnd["flood_burst"]  # that second, reported on its own
    assert burst["sent"] > 0 and not burst["errors"] and 0.9 < burst["seconds"] < 2, burst
    assert out["flood_burst"]["p99_ms"] is not None and out["settle_s"] == 1
    assert rnd["at_quota_flooded"]["refused_429"] <= rnd["at_quota_flooded"]["batches"]
    assert {"p99_vs_alone_median", "p99_vs_at_quota_median", "rate_vs_alone_median"} <= out.keys()
