"""The store's connection layer: one Redis server or a Redis Cluster, by the same code.

Every caller's store (bluedove/store/store.py) stands on `Connection`: the client (whose pool
holds a connection per blocked long-poll), the runner that sends a batch of Lua calls by
slot (bluedove/store/batch.py), and the store's limits. The key layout, and which keys share
a slot, is bluedove/store/keys.py's; the scripts are bluedove/store/scripts.py's.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from redis.exceptions import AuthenticationError, AuthenticationWrongNumberOfArgsError

from bluedove.store.batch import Runner
from bluedove.store.client import async_client, wait_settings
from bluedove.store.wire import PackedConnection


@dataclass(frozen=True)
class StoreLimits:
    """The store's limits: subscriptions per queue, dedup window, visibility timeout, queue bounds."""

    max_subscriptions_per_queue: int = 10_000
    dedup_window_s: int = 600
    visibility_timeout_s: float = 30.0
    catalog_log_maxlen: int = 1_000_000
    # A queue's bounds when it was created without its own (and for queues created before
    # queues had bounds): most undelivered deliveries (0 = no cap), retention s (0 = none).
    max_undelivered: int = 100_000
    retention_s: int = 0


class Connection:
    """A client of the store with its limits; the base of every caller's store."""

    def __init__(self, url: str, limits: StoreLimits | None = None) -> None:
        self.url = url
        self.limits = limits or StoreLimits()
        # redis-py's pool refuses connection 101 by default ("Too many connections"), and each
        # long-poll holds one while it blocks: the cap must cover every poll a dispatcher serves.
        self.r = async_client(url, connection_class=PackedConnection, health_check_interval=30,
                              max_connections=10_000)
        self.runner = Runner(self.r, *wait_settings(url))

    async def close(self) -> None:
        await self.runner.close()
        await self.r.aclose()

    def _at(self, key: str) -> dict[str, Any]:
        """Where to send XREAD and XREADGROUP about `key` on a cluster. Their keys can sit
        anywhere in the command ("movable keys"), so redis-py's cluster client would first ask
        a node which they are (COMMAND GETKEYS): a round trip of its own per long-poll and per
        catalogue read, and a failure while that node is down. The key's node is known here."""
        return {"target_nodes": self.r.get_node_from_key(key)} if self.runner.cluster else {}

    async def ping(self) -> bool:
        return bool(await self.r.ping())


async def wait_ready(store: Connection, timeout_s: float = 10.0) -> None:
    """Until the store answers, for at most `timeout_s`. A refused password or user is raised at
    once: waiting cannot make it right."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await store.ping()
            return
        except (AuthenticationError, AuthenticationWrongNumberOfArgsError):
            raise
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
