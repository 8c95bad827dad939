"""`bluedove bench store-wait`: what `?wait=1` costs on a Redis Cluster (docs/store.md, "The cost
of `wait=1`").

One local Redis Cluster (`--primaries`, default 3, a replica each), two measurements:

  store       delivery batches (16 messages to 12 of 100 queues each: ~190 deliveries over every
              primary) written by two Stores on the one cluster, one without WAIT and one with
              `?wait=1`, taking turns batch by batch (`--rounds`), so that whatever else loads the
              machine weighs on both alike: batch p50 / p99 and deliveries/s of each;
  end to end  (unless `--no-e2e`) a local cluster (`--matchers`, default 2) on the emptied store,
              once without `wait` and once with `wait=1`: the workload's subscriptions over
              `--queues` queues, then a steady `--rate` single publishes a second for
              `--seconds` (publish p50 / p99), then `--publishers` publishers back to back for
              as long (messages/s and deliveries/s written, from the matchers' counters).

Every batch must be written whole, every publish accepted, and the deliveries the matchers wrote
must be the ones the workload's brute-force oracle names (WAIT changes the cost, not the
outcome): the command exits 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import redis

from bluedove.client import AsyncClient
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags, add_workload_flags, report, workload_or_none
from bluedove.lab.workloads import brute_force
from bluedove.local.cluster import LocalCluster
from bluedove.store.redis_cluster import RedisClusterServers
from bluedove.store.store import Store

WAIT = "?wait=1&wait_ms=1000"  # a delivery write waits for one replica, at most a second


def add_parser(sub) -> None:
    p = sub.add_parser("store-wait", help=BENCHES["store-wait"], description=__doc__)
    p.add_argument("--primaries", type=int, default=3, help="Redis Cluster primaries, a replica each (default 3)")
    p.add_argument("--rounds", type=int, default=100, help="store: batches of each kind (default 100)")
    p.add_argument("--no-e2e", dest="e2e", action="store_false", help="the store measurement only")
    add_workload_flags(p, subs=2000)
    p.add_argument("--queues", type=int, default=20, help="end to end: queues the subscriptions go to (default 20)")
    p.add_argument("--matchers", type=int, default=2, help="end to end: matcher processes (default 2)")
    p.add_argument("--rate", type=float, default=100.0, help="end to end: steady publishes a second (default 100)")
    p.add_argument("--seconds", type=float, default=4.0,
                   help="end to end: seconds of the steady phase, and of the saturated one (default 4)")
    p.add_argument("--publishers", type=int, default=16,
                   help="end to end: publishers back to back in the saturated phase (default 16)")
    add_output_flags(p)
    p.set_defaults(func=run_store_wait)


def _percentiles(seconds: list[float], prefix: str) -> dict:
    ms = np.array(seconds) * 1000
    return {f"{prefix}_p{p}_ms": round(float(np.percentile(ms, p)), 1) if len(ms) else None for p in (50, 99)}


# -- the store alone -----------------------------------------------------------------------------
async def store_cost(url: str, rounds: int = 100, seed: int = 1) -> dict[int, dict]:
    """Delivery batches written by two Stores on one cluster, without WAIT (0) and with ?wait=1
    (1), taking turns batch by batch: each one's figures, and `short_batches`, the batches not
    written whole."""
    stores = {0: Store(url), 1: Store(url + WAIT)}
    rng = random.Random(seed)
    took: dict[int, list[float]] = {0: [], 1: []}
    written, short = {0: 0, 1: 0}, {0: 0, 1: 0}
    try:
        queues = [q for q, _ in await stores[0].create_queues(100)]
        for r in range(rounds):
            for wait in (0, 1):
                messages = [(f"c{wait}-{r}-{i}", '{"id":"x"}') for i in range(16)]
                deliveries = [(q, i, '["s"]') for i in range(16) for q in rng.sample(queues, 12)]
                t0 = time.perf_counter()
                _, n = await stores[wait].deliver(messages, deliveries)
                took[wait].append(time.perf_counter() - t0)
                short[wait] += n != len(deliveries)
                written[wait] += n
    finally:
        for st in stores.values():
            await st.close()
    return {wait: {**_percentiles(ts, "batch"), "deliveries_per_s": round(written[wait] / sum(ts)) if ts else 0,
                   "short_batches": short[wait]} for wait, ts in took.items()}


# -- end to end ----------------------------------------------------------------------------------
def written(c: LocalCluster) -> float:
    """Deliveries the cluster's matchers have written so far (their Prometheus counters)."""
    total = 0.0
    for m in c.matchers():
        with urllib.request.urlopen(c.metrics_url(m), timeout=5) as resp:
            total += sum(float(line.rsplit(" ", 1)[1]) for line in resp.read().decode().splitlines()
                         if line.startswith("bluedove_matcher_deliveries_written"))
    return total


async def load(c: LocalCluster, points: np.ndarray, steady_rate: float, seconds: float,
               publishers: int) -> tuple[dict, dict[str, tuple[float, ...]]]:
    """Single publishes of `points` (taken in turn) through the SDK's REST client: a steady phase
    (`steady_rate` a second for `seconds`: their latencies), then a saturated one (`publishers`
    back to back for `seconds`: messages/s, deliveries/s written). (figures, {message id: point}
    of every publish accepted); a refused one is counted in `errors`."""
    messages: dict[str, tuple[float, ...]] = {}
    lat: list[float] = []
    errors: dict[str, int] = {}
    names = c.space.names
    count = itertools.count()

    async def publish(client: AsyncClient, mid: str) -> float | None:
        point = tuple(points[next(count) % len(points)].tolist())
        t0 = time.perf_counter()
        try:
            await client.publish(dict(zip(names, point)), id=mid)
        except Exception as exc:  # noqa: BLE001 - counted: the bench fails on any
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            return None
        messages[mid] = point
        return time.perf_counter() - t0

    async def timed(client: AsyncClient, mid: str) -> None:
        if (took := await publish(client, mid)) is not None:
            lat.append(took)

    async with AsyncClient(c.url, retries=0, timeout_s=30.0) as client:
        tasks = []
        for i in range(int(steady_rate * seconds)):
            tasks.append(asyncio.create_task(timed(client, f"s-{i}")))
            await asyncio.sleep(1 / steady_rate)
        await asyncio.gather(*tasks)
        written0, t0 = written(c), time.monotonic()
        done = 0

        async def publisher(w: int) -> None:
            nonlocal done
            i = 0
            while time.monotonic() - t0 < seconds:
                await publish(client, f"w{w}-{i}")
                i, done = i + 1, done + 1

        await asyncio.gather(*(publisher(w) for w in range(publishers)))
        took = time.monotonic() - t0
        await asyncio.sleep(0.5)  # the counters are read from the matchers' metrics
        delivered = written(c) - written0
    return {**_percentiles(lat, "publish"), "saturated_msgs_per_s": round(done / took),
            "saturated_deliveries_per_s": round(delivered / took), "errors": errors}, messages


def expected_deliveries(w, queues: int, messages: dict[str, tuple[float, ...]]) -> int:
    """The (queue, message) pairs the workload's oracle names for `messages`, subscription j in
    queue j % `queues`: the deliveries due."""
    if not messages:
        return 0
    matched = brute_force(w.lows, w.highs, np.array(list(messages.values())))
    return sum(len(np.unique(m % queues)) for m in matched)


async def _subscribe(url: str, w, queues: int) -> None:
    """Subscription j of the workload into the queue j % `queues`."""
    async with AsyncClient(url, timeout_s=120.0) as c:
        for q in range(queues):
            rows = range(q, w.n_subs, queues)
            if len(rows):
                await c.subscribe_many([w.predicates(j) for j in rows], await c.create_queue())


def _end_to_end(args: argparse.Namespace, w, servers: RedisClusterServers, root: Path, wait: int) -> dict:
    """One run of the end-to-end measurement on the emptied store, with or without WAIT."""
    for port in servers.primaries():  # their replicas follow
        with redis.Redis(port=port) as r:
            r.flushall()
    space = root / "space.json"
    space.write_text(json.dumps(w.space.to_json()))
    c = LocalCluster(matchers=args.matchers, http_port=0, data_dir=root / f"cluster-{wait}", space_file=str(space),
                     store=servers.url + (WAIT if wait else ""), quiet=True, restart=False)
    c.start(timeout_s=120)
    try:
        asyncio.run(_subscribe(c.url, w, args.queues))
        written0 = written(c)
        points = w.sample(20_000, np.random.default_rng([args.seed, wait]))
        fig, messages = asyncio.run(load(c, points, args.rate, args.seconds, args.publishers))
        time.sleep(0.5)
        fig["written"], fig["expected"] = round(written(c) - written0), expected_deliveries(w, args.queues, messages)
    finally:
        c.stop()
    return fig


def run_store_wait(args: argparse.Namespace) -> int:
    w = workload_or_none(args)
    if w is None:
        return 2
    if min(args.primaries, args.rounds, args.matchers, args.publishers, args.queues) < 1 or args.rate <= 0 \
            or args.seconds <= 0:
        print("bench store-wait: --primaries, --rounds, --matchers, --publishers, --queues, --rate and --seconds "
              "must be positive", file=sys.stderr)
        return 2
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bluedove-store-wait-") as tmp:
        servers = RedisClusterServers(Path(tmp) / "rc", primaries=args.primaries, replicas=1).start()
        try:
            store = asyncio.run(store_cost(servers.url, args.rounds, args.seed))
            e2e = {w_: _end_to_end(args, w, servers, Path(tmp), w_) for w_ in (0, 1)} if args.e2e else {}
        finally:
            servers.stop()
    why = [f"{'with' if k else 'without'} wait: {x['short_batches']} batches not written whole"
           for k, x in store.items() if x["short_batches"]]
    why += [f"{'with' if k else 'without'} wait, end to end: {x['errors']} publishes refused" for k, x in e2e.items()
            if x["errors"]]
    why += [f"{'with' if k else 'without'} wait, end to end: {x['written']} deliveries written, the oracle names "
            f"{x['expected']}" for k, x in e2e.items() if x["written"] != x["expected"]]
    result = {"kind": "store-wait", "primaries": args.primaries, "replicas_each": 1, "rounds": args.rounds,
              "workload": w.name, "store": {"without": store[0], "wait_1": store[1]},
              "e2e": {"without": e2e[0], "wait_1": e2e[1]} if e2e else None, "ok": not why, "failures": why,
              "cores": os.cpu_count(), "load_avg_start": round(load_start, 2),
              "load_avg_end": round(os.getloadavg()[0], 2), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    report(result, args.json, _print)
    return 0 if not why else 1


def _print(r: dict) -> None:
    print(f"{r['primaries']} primaries, a replica each; load {r['load_avg_start']} -> {r['load_avg_end']}")
    print(f"store, {r['rounds']} batches of each kind taking turns:")
    for kind, x in r["store"].items():
        print(f"  {kind:<8} batch p50 {x['batch_p50_ms']} ms, p99 {x['batch_p99_ms']} ms, "
              f"{x['deliveries_per_s']:,} deliveries/s")
    if r["e2e"]:
        print(f"end to end, {r['workload']}:")
        for kind, x in r["e2e"].items():
            print(f"  {kind:<8} publish p50 {x['publish_p50_ms']} ms, p99 {x['publish_p99_ms']} ms; saturated "
                  f"{x['saturated_msgs_per_s']} msgs/s, {x['saturated_deliveries_per_s']} deliveries/s; "
                  f"{x['written']} deliveries written of {x['expected']} due")
    print("  exact" if r["ok"] else "  FAILED: " + "; ".join(r["failures"]))
