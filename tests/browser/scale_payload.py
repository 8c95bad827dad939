"""Scale a recorded GET /v1/cluster answer up to N matchers: the dashboard's load test input.

    python -m tests.browser.scale_payload tests/browser/data/cluster.json 200 tests/browser/data/cluster-200.json

data/cluster.json was recorded from `bluedove up --autoscale` (4 matchers, one of them just
killed). Each dimension's range is cut into N equal segments, owners shuffled per dimension
(mPartition: one segment per matcher per dimension); every member copies a recorded member's
fields (the shape stays the real one) with its load scaled so that a few hot spots stand out,
and a few members are suspect or dead. Deterministic (seeded)."""

from __future__ import annotations

import copy
import json
import random
import sys


def scale(recorded: dict, n: int, seed: int = 17) -> dict:
    rng = random.Random(seed)
    out = copy.deepcopy(recorded)
    dims = out["space"]["dimensions"]
    templates = [m for m in recorded["members"] if m["segments"]]
    ids = [f"m{i + 1}" for i in range(n)]
    order = {d["name"]: rng.sample(ids, n) for d in dims}
    members = []
    for i, mid in enumerate(ids):
        m = copy.deepcopy(templates[i % len(templates)])
        m["id"], m["address"] = mid, f"127.0.0.1:{40000 + i}"
        m["status"], m["idle"] = "alive", False
        for d in dims:
            k = order[d["name"]].index(mid)
            width = (d["max"] - d["min"]) / n
            m["segments"][d["name"]] = [d["min"] + k * width, d["min"] + (k + 1) * width]
            # hot spots: segments near a third of the range carry most of the load
            hot = max(0.02, 1.6 - 8 * abs(k / n - 0.33))
            load = m["load"].setdefault(d["name"], {"lambda": 0, "mu": 10000, "q": 0, "matched": 0})
            load["mu"] = round(rng.uniform(5000, 60000), 3)
            load["lambda"] = round(load["mu"] * hot * rng.uniform(0.3, 0.7), 3)
            load["congestion"] = round(load["lambda"] / load["mu"], 6)
            load["q"] = int(max(0, hot - 0.9) * rng.uniform(100, 2000))
            m["subscriptions"][d["name"]] = rng.randint(50, 5000)
        m["cpu"] = round(rng.uniform(0.01, 0.9), 4)
        m["rss_bytes"] = rng.randint(150, 400) * 1024 * 1024
        members.append(m)
    for m in rng.sample(members, 3):
        m["status"] = "suspect"
    for m in rng.sample(members, 2):
        m["status"], m["idle"], m["segments"], m["load"], m["cpu"], m["rss_bytes"] = "dead", True, {}, {}, None, None
    # the dead ones' segments go to their right-hand neighbours (as a takeover merges them)
    for d in dims:
        live = sorted((m for m in members if d["name"] in m["segments"]), key=lambda m: m["segments"][d["name"]][0])
        for a, b in zip(live, live[1:]):
            a["segments"][d["name"]][1] = b["segments"][d["name"]][0]
        live[-1]["segments"][d["name"]][1] = d["max"]
        live[0]["segments"][d["name"]][0] = d["min"]
    out["members"] = members
    return out


def main(argv: list[str]) -> None:
    src, n, dest = argv[0], int(argv[1]), argv[2]
    with open(src) as f:
        recorded = json.load(f)
    with open(dest, "w") as f:
        json.dump(scale(recorded, n), f, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1:])
