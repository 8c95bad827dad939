"""One fault on a fresh local cluster, under steady publishing, and its figures.

Figures: accepted messages lost (goal 0), duplicates after dedup (goal 0), deliveries with
the wrong subscriptions (goal 0), the seconds during which publishes were refused (first to
last refusal), and the seconds from the fault until the cluster is whole again.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bluedove.client import AsyncClient
from bluedove.lab.faults import inject
from bluedove.lab.faults.netns import ROOT_IP, Network
from bluedove.lab.faults.workload import Published, drain, expected_pairs, judge, publish_steadily, subscribe
from bluedove.local.cluster import LocalCluster
from bluedove.store.server import RedisServer

# The store's disk for `disk-full` (MB): room for the run's AOF, small enough to fill at once.
TMPFS_MB = 48


@dataclass
class FaultResult:
    """One fault's figures: publishes accepted and refused, recovery times, and the delivery check."""

    fault: str
    accepted: int
    attempts: int
    refusals: int
    given_up: int
    refused_s: float  # first to last refused attempt after the fault; 0 when none was refused
    whole_s: float  # fault → every segment owner alive and the dispatcher ready
    expected: int  # (queue, message) deliveries the oracle names
    lost: int
    duplicates: int
    wrong: int
    unaccepted: int  # deliveries of messages never accepted (allowed: at-least-once)
    notes: dict = field(default_factory=dict)

    def ok(self) -> bool:
        return (self.lost == 0 and self.duplicates == 0 and self.wrong == 0 and self.given_up == 0
                and not self.notes.get("accepted_while_store_down"))

    def as_json(self) -> dict:
        return asdict(self)


async def _faulted(cluster: LocalCluster, name: str, rate: float, before_s: float, after_s: float,
                   queues: int, subs: int, seed: int, env_kw: dict) -> FaultResult:
    rng = random.Random(seed)
    async with AsyncClient(cluster.url, retries=0, timeout_s=10) as client:
        setup = await subscribe(client, rng, queues, subs)
        pub = Published()
        stop = asyncio.Event()
        publisher = asyncio.create_task(publish_steadily(client, rng, f"{name}-{seed}", rate, pub, stop))
        seen = Seen()
        try:
            await asyncio.sleep(before_s)
            env = inject.Env(cluster, client, **env_kw)
            t_fault = time.monotonic()
            watcher = asyncio.create_task(_watch(env, seen, stop))
            notes = await inject.FAULTS[name](env)
            await inject.wait_for(lambda: _whole_now(env), 60, "every segment owner alive and the dispatcher ready")
            await asyncio.sleep(after_s)
        finally:
            stop.set()
            await publisher
        await watcher
        got = await drain(client, setup.queues)
    verdict = judge(expected_pairs(setup.subs, pub.points), got, set(pub.points))
    after = [t for t, _ in pub.refusals if t >= t_fault]
    broken = [t for t, whole in seen.samples if not whole]
    # whole again: the first whole sample after the last broken one (0 when never broken)
    whole_at = next((t for t, whole in seen.samples if whole and t > broken[-1]), None) if broken else t_fault
    notes |= {"statuses_seen": sorted(seen.statuses), "epochs_seen": sorted(seen.epochs)}
    if env.no_writes is not None:  # sent and acknowledged while the store could not write: must be none
        # (an attempt sent before the kill may be written before it and answered after; one
        # answered after the restart may have been written by the restarted server)
        lo, hi = env.no_writes
        notes["accepted_while_store_down"] = sum(1 for sent, answered, _ in pub.accepted_at
                                                 if lo < sent and answered < hi)
    return FaultResult(
        fault=name, accepted=len(pub.points), attempts=pub.attempts, refusals=len(pub.refusals),
        given_up=len(pub.given_up), refused_s=round(after[-1] - after[0], 2) if after else 0.0,
        whole_s=round((whole_at or time.monotonic()) - t_fault, 2), expected=verdict.expected,
        lost=verdict.lost, duplicates=verdict.duplicates, wrong=verdict.wrong, unaccepted=verdict.unaccepted,
        notes={k: round(v, 2) if isinstance(v, float) else v for k, v in notes.items()})


@dataclass
class Seen:
    """What watching the cluster through a fault saw: wholeness over time, member statuses, epochs."""

    samples: list[tuple[float, bool]] = field(default_factory=list)  # (time, whole)
    statuses: set[str] = field(default_factory=set)  # "m2 suspect", …: every non-alive status seen
    epochs: set[int] = field(default_factory=set)


async def _whole_now(env: inject.Env, seen: Seen | None = None) -> bool:
    view, ready = await asyncio.gather(inject.cluster_view(env.client), _ready(env.cluster))
    if seen is not None:
        if view:
            seen.epochs.add(view["epoch"])
            seen.statuses |= {f"{m['id']} {m['status']}" for m in view["members"] if m["status"] != "alive"}
        seen.samples.append((time.monotonic(), inject.is_whole(view) and ready))
    return inject.is_whole(view) and ready


async def _watch(env: inject.Env, seen: Seen, stop: asyncio.Event, every_s: float = 0.2) -> None:
    """Samples the dispatcher's view (and readiness) from the fault on, until publishing stops."""
    while not stop.is_set():
        await _whole_now(env, seen)
        await asyncio.sleep(every_s)


async def _ready(cluster: LocalCluster) -> bool:
    import urllib.request

    def probe() -> bool:
        try:
            with urllib.request.urlopen(f"{cluster.url}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False
    return await asyncio.to_thread(probe)


def run_fault(name: str, data_dir: Path, *, rate: float = 40.0, before_s: float = 2.0, after_s: float = 2.0,
              queues: int = 8, subs: int = 300, seed: int = 1, matchers: int = 4, **env_kw) -> FaultResult:
    """`name` (a key of inject.FAULTS) done to a fresh cluster of real processes in `data_dir`."""
    if name not in inject.FAULTS:
        raise ValueError(f"unknown fault {name!r}; one of {', '.join(inject.FAULTS)}")
    data_dir = Path(data_dir)
    store_dir = data_dir / "redis"
    kw: dict = {}
    network = redis = None
    try:
        if name == "disk-full":
            inject.mount_tmpfs(store_dir, TMPFS_MB)
        if name == "partition":  # matchers in namespaces, the rest on the bridge's address
            network = Network([f"m{i + 1}" for i in range(matchers)]).setup()
            redis = RedisServer(store_dir, extra_args=["--bind", "127.0.0.1", ROOT_IP]).start()
            kw = {"host": ROOT_IP, "store": f"redis://{ROOT_IP}:{redis.port}/0",
                  "matcher_net": network.matcher_net()}
            env_kw = {**env_kw, "network": network}
        cluster = LocalCluster(matchers=matchers, dispatchers=2 if name == "dispatcher-kill" else 1,
                               data_dir=data_dir, quiet=True, restart=False, **kw)
        try:
            cluster.start()
            return asyncio.run(_faulted(cluster, name, rate, before_s, after_s, queues, subs, seed, env_kw))
        finally:
            cluster.stop()
    finally:
        if redis is not None:
            redis.stop()
        if network is not None:
            network.teardown()
        if name == "disk-full":
            inject.unmount(store_dir)
