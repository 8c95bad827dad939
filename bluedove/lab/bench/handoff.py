"""`bluedove bench handoff`: how long a hand-off takes for a segment of many subscriptions.

One matcher holds every subscription of the paper workload; a second joins (a split: it
fetches its half of every dimension from the first, Export), then leaves again (a merge: the
first fetches the range back from it), then a third joins and is SIGKILLed, so the first
takes its segments over from the catalogue (the old owner is dead). The times are the
hand-offs the coordinator reports: the takers' loading, before the new epoch is published.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import tempfile
import time

from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags
from bluedove.lab.bench.stage import seed_catalogue
from bluedove.lab.workloads import paper
from bluedove.local.cluster import LocalCluster


def _events(cluster: LocalCluster) -> list[dict]:
    return cluster.cluster_state()["autoscaler"]["events"]


def _wait_event(cluster: LocalCluster, n: int, limit_s: float = 120) -> dict:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        ev = _events(cluster)
        if len(ev) >= n:
            return ev[n - 1]
        time.sleep(0.2)
    raise RuntimeError(f"no event #{n} within {limit_s} s")


def _loaded_s(event: dict) -> float:
    return float(re.search(r"hand-off loaded in ([0-9.]+) s", event["reason"]).group(1))


def _subs(cluster: LocalCluster, member: str) -> int:
    for m in cluster.cluster_state()["members"]:
        if m["id"] == member:
            return sum(m["subscriptions"].values())
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("handoff", help=BENCHES["handoff"])
    p.add_argument("--subs", type=int, default=40_000, help="subscriptions in the segment (default 40,000)")
    add_output_flags(p)
    p.set_defaults(func=run_handoff_bench)


def run_handoff_bench(args) -> int:
    w = paper.get("paper", seed=args.seed, n_subs=args.subs)
    with tempfile.TemporaryDirectory(prefix="bluedove-handoff-") as tmp:
        cluster = LocalCluster(matchers=1, http_port=0, data_dir=tmp, quiet=True, restart=False,
                               matcher_env={"BLUEDOVE_HANDOFF_GRACE_S": "2"}).start()
        try:
            seed_s = asyncio.run(seed_catalogue(cluster.store_url, w))
            # Until m1 has tailed the whole catalogue log: its set sizes stop changing.
            deadline, last, held = time.monotonic() + 180, -1, 0
            while time.monotonic() < deadline and (held := _subs(cluster, "m1")) != last:
                last = held
                time.sleep(2.0)
            cluster.add_matcher()
            split = _wait_event(cluster, 1)
            time.sleep(3)
            moved = _subs(cluster, "m2")
            cluster.remove_matcher("m2")
            merge = _wait_event(cluster, 2)
            time.sleep(3)
            victim = cluster.add_matcher()
            split2 = _wait_event(cluster, 3)
            time.sleep(3)
            os.kill(victim.pid, signal.SIGKILL)
            takeover = _wait_event(cluster, 4)
        finally:
            cluster.stop()
    result = {"bench": "handoff", "workload": "paper", "subscriptions": w.n_subs, "seed_s": round(seed_s, 1),
              "m1_entries_before": held, "split_entries_moved": moved,
              "split_s": _loaded_s(split), "merge_s": _loaded_s(merge), "split_again_s": _loaded_s(split2),
              "takeover_catalogue_s": _loaded_s(takeover)}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{w.n_subs} subscriptions (paper), one matcher holding {held} set entries (4 dimensions)")
    print(f"split (new matcher fetches {moved} entries from the old owner)   {result['split_s']:.2f} s")
    print(f"merge (the old owner fetches them back from the leaver)          {result['merge_s']:.2f} s")
    print(f"split again (a third matcher joins)                              {result['split_again_s']:.2f} s")
    print(f"takeover (the old owner is dead: loaded from the catalogue)      {result['takeover_catalogue_s']:.2f} s")
    return 0
