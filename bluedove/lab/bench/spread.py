"""`bluedove bench spread`: how long after a takeover every dispatcher uses the new table.

A local cluster of 4 matchers and 3 dispatchers (real processes); once every dispatcher has
registered the first table, one matcher is SIGKILLed. The coordinator takes it over and logs
the takeover in the store's event log (`at`, stamped once the new epoch is stored and its
owners adopted it). Each dispatcher registers in the store, every few seconds, the epoch it
uses and the wall time it adopted that table (`Store.register_dispatcher`): the delay of a
dispatcher is its adoption time minus the event's time. Each repetition is a fresh cluster.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import statistics
import tempfile
import time
from datetime import datetime

from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags, report
from bluedove.local.cluster import LocalCluster
from bluedove.store import Store


def add_parser(sub) -> None:
    p = sub.add_parser("spread", help=BENCHES["spread"])
    p.add_argument("--matchers", type=int, default=4, help="matcher processes (default 4)")
    p.add_argument("--dispatchers", type=int, default=3, help="dispatcher processes (default 3)")
    p.add_argument("--repeat", type=int, default=3, help="takeovers measured, each on a fresh cluster (default 3)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for the takeover and for every dispatcher to adopt it (default 60)")
    add_output_flags(p)
    p.set_defaults(func=run_spread_bench)


async def _state(url: str) -> tuple[list[dict], list[dict], dict | None]:
    store = Store(url)
    try:
        return await store.events(), await store.dispatchers(), await store.get_table()
    finally:
        await store.close()


def _wait(url: str, done, timeout_s: float, what: str):
    """Polls the store every 50 ms until `done(events, dispatchers, table)` returns a value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = done(*asyncio.run(_state(url)))
        if out:
            return out
        time.sleep(0.05)
    raise RuntimeError(f"not within {timeout_s:.0f} s: {what}")


def _takeover(events: list[dict], _dispatchers, _table) -> tuple[float, int] | None:
    for e in events:
        if e["action"] == "takeover":
            epoch = int(re.search(r"epoch (\d+)", e["reason"]).group(1))
            return datetime.fromisoformat(e["at"]).timestamp(), epoch
    return None


def one_takeover(args, tmp: str) -> dict:
    cluster = LocalCluster(matchers=args.matchers, dispatchers=args.dispatchers, http_port=0, data_dir=tmp,
                           quiet=True, restart=False).start()
    try:
        url = cluster.store_url
        first = cluster.table.epoch

        def registered(_events, disps, _table):
            return len(disps) >= args.dispatchers and all(d.get("epoch", 0) >= first for d in disps)

        _wait(url, registered, args.timeout, f"{args.dispatchers} dispatchers registered at epoch {first}")
        victim = cluster.child(f"m{args.matchers}")  # not m1, the coordinator
        killed_at = time.time()
        os.kill(victim.pid, signal.SIGKILL)
        event_at, epoch = _wait(url, _takeover, args.timeout, "the takeover event")

        def adopted(_events, disps, _table):
            return len(disps) >= args.dispatchers and all(d.get("epoch", 0) >= epoch for d in disps) and disps

        disps = _wait(url, adopted, args.timeout, f"every dispatcher at epoch {epoch}")
    finally:
        cluster.stop()
    delays = {d["id"]: round(d["adopted_at"] - event_at, 3) for d in disps}
    return {"epoch": epoch, "kill_to_takeover_s": round(event_at - killed_at, 3), "delays_s": delays,
            "max_s": max(delays.values())}


def run_spread_bench(args) -> int:
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="bluedove-spread-") as tmp:
            runs.append(one_takeover(args, tmp))
    maxes = [r["max_s"] for r in runs]
    result = {"bench": "spread", "matchers": args.matchers, "dispatchers": args.dispatchers, "runs": runs,
              "max_s_median": round(statistics.median(maxes), 3), "max_s_worst": max(maxes)}
    report(result, args.json, _print)
    return 0


def _print(result: dict) -> None:
    print(f"{result['matchers']} matchers, {result['dispatchers']} dispatchers; one matcher SIGKILLed per run")
    print("run  kill→takeover  takeover→dispatcher uses it (each)           max")
    for i, r in enumerate(result["runs"], 1):
        each = "  ".join(f"{d} {s:6.3f}" for d, s in sorted(r["delays_s"].items()))
        print(f"{i:3}  {r['kill_to_takeover_s']:10.2f} s  {each:42}  {r['max_s']:.3f} s")
    print(f"max over dispatchers: median {result['max_s_median']:.3f} s, worst {result['max_s_worst']:.3f} s")
