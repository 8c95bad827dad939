"""Each caller's store, over one connection layer (bluedove/store/connection.py).

One server or a Redis Cluster (bluedove/store/client.py), by the same code. Every change of
several keys of one slot is one Lua script (bluedove/store/scripts.py); where a change spans
slots (a delivery batch on a cluster, deleting a queue), each slot's step is atomic and safe to
repeat. A process opens the store its role needs; tools, the lab and the tests open `Store`,
which is all of them.
"""

from __future__ import annotations

from bluedove.store.catalogue import CatalogueReads, CatalogueWrites, LimitExceeded, QueueMissing
from bluedove.store.cluster_state import ClusterState
from bluedove.store.connection import Connection, StoreLimits, wait_ready
from bluedove.store.deliveries import Deliveries
from bluedove.store.message_log import MessageLog
from bluedove.store.queues import CONSUMER, GROUP, BadToken, Queues
from bluedove.store.replays import Replays

__all__ = ["CONSUMER", "GROUP", "AutoscalerStore", "BadToken", "Connection", "DispatcherStore", "LimitExceeded",
           "MatcherStore", "QueueMissing", "Store", "StoreLimits", "wait_ready"]


class DispatcherStore(Queues, CatalogueWrites, Replays, ClusterState, MessageLog):
    """What a dispatcher needs: queues and tokens, poll and ack, catalogue writes, the table and
    events for /v1/cluster, its heartbeat, replays and the message logs they read. Promises:
    every write of several keys is atomic on its slot; a token check takes the same time for a
    missing queue as for a wrong token."""


class MatcherStore(CatalogueReads, Deliveries, ClusterState, MessageLog):
    """What a matcher needs: the catalogue's snapshot and log tail, the write of its matched
    batches (and their chunks of a space's log), the table (compare-and-set) and the event log.
    Promises: a batch written twice delivers nothing twice; a snapshot replayed with the log
    after its position is exact."""


class AutoscalerStore(ClusterState):
    """What the autoscaler needs: the table, the dispatchers' heartbeats (their CPU), its own
    settings for /v1/cluster, and the event log its decisions go to."""


class Store(DispatcherStore, MatcherStore, AutoscalerStore):
    """The whole store, for tools that act as every role: the CLI, LocalCluster, the lab, tests."""
