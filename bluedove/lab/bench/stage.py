"""The stage of the cluster benches: the workload into the catalogue (before the cluster starts, or while
it runs), and for `delivery` and `publish` a private store (one redis-server, or for `delivery` a
local Redis Cluster) with the workload in its catalogue, and a local cluster on it, stopped after
the bench."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bluedove.lab.bench.store_nodes import BenchStore, StoreShape
from bluedove.lab.workloads import Workload
from bluedove.local.cluster import LocalCluster
from bluedove.store import Store
from bluedove.store.server import RedisServer
from bluedove.store.store import StoreLimits


async def load_workload(url: str, w: Workload) -> tuple[list[tuple[str, str]], list[str]]:
    """Create the workload's queues and subscriptions through the store (the catalogue the
    matchers load at start); returns [(queue, token)] and the subscription ids."""
    store = Store(url)
    try:
        queues = await store.create_queues(w.n_queues)
        sub_ids = [f"s{j}" for j in range(w.n_subs)]
        subs = [{"id": sub_ids[j], "queue": queues[q][0], "predicates": w.predicates(j)}
                for j, q in enumerate(w.queue_of.tolist())]
        await store.add_subscriptions(subs)
        return queues, sub_ids
    finally:
        await store.close()


async def seed_catalogue(url: str, w: Workload) -> float:
    """The workload's subscriptions straight into the catalogue of a running cluster, 64 at a
    time (the matchers tail the catalogue log, as they do for any subscription); seconds taken."""
    store = Store(url, StoreLimits(max_subscriptions_per_queue=10**9))
    t0 = time.monotonic()
    try:
        queues = [(await store.create_queue())[0] for _ in range(w.n_queues)]
        sem = asyncio.Semaphore(64)

        async def one(j: int) -> None:
            async with sem:
                await store.add_subscription({"id": f"s{j}", "queue": queues[int(w.queue_of[j])],
                                              "predicates": w.predicates(j)})

        await asyncio.gather(*(one(j) for j in range(w.n_subs)))
    finally:
        await store.close()
    return time.monotonic() - t0


def stored_table(url: str) -> dict:
    """The segment table as the store holds it now."""

    async def get() -> dict:
        store = Store(url)
        try:
            return await store.get_table()
        finally:
            await store.close()

    return asyncio.run(get())


@dataclass
class Stage:
    """A staged bench: the running cluster, its store, and the workload's queues and subscriptions."""

    cluster: LocalCluster
    redis: RedisServer | None  # the one redis-server; None on a Redis Cluster
    store: BenchStore
    queues: list[tuple[str, str]]  # (queue, token) of each of the workload's queues
    sub_ids: list[str]
    load_s: float  # seconds the workload took to load


@contextmanager
def stage(args: argparse.Namespace, w: Workload, shape: StoreShape = StoreShape()) -> Iterator[Stage]:
    """`w` loaded into a private store of `shape`, then `--matchers` and `--dispatchers` on it."""
    with tempfile.TemporaryDirectory(prefix="bluedove-bench-") as tmp:
        store = BenchStore(Path(tmp), shape)
        try:
            store.start()
            t0 = time.monotonic()
            queues, sub_ids = asyncio.run(load_workload(store.url, w))
            load_s = time.monotonic() - t0
            # The dispatchers' message sample (bench publish --sample-rate), into the temporary folder.
            cluster = LocalCluster(matchers=args.matchers, dispatchers=args.dispatchers, http_port=0, data_dir=tmp,
                                   store=store.url, quiet=True, restart=False,
                                   sample_rate=getattr(args, "sample_rate", 0.0))
            cluster.start(timeout_s=300)
            try:
                yield Stage(cluster, store.server, store, queues, sub_ids, load_s)
            finally:
                cluster.stop()
        finally:
            store.stop()
