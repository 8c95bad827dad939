"""`bluedove demo --workload orders`: the shop's orders (docs/workloads.md, "`orders`: typed
attributes with skew") on the demo's fleet: the typed space's file, each subscriber's queue with
its subscriptions, orders as API messages, and a ledger whose oracle is the core's exact check
(`Filter.matches`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bluedove.core.space import Space
from bluedove.lab.demo.fleet import Ledger
from bluedove.lab.workloads import orders
from bluedove.lab.workloads.typed import Served, matching

# Each subscriber's queue holds this many of the workload's subscriptions: on the default 100
# subscribers, 300 subscriptions, and an order reaches about 8 queues.
SUBS_PER_QUEUE = 3
DEFAULT_SUBSCRIBERS = 100
DEFAULT_RATE = 100.0  # orders per second


def space_yaml(space: Space | None = None) -> str:
    """The orders' space as the YAML text `--space FILE` reads (attributes and partition)."""
    data = (space or orders.orders_space()).to_json()
    return yaml.safe_dump({"attributes": data["attributes"], "partition": data["partition"]}, sort_keys=False)


def write_space(path: Path) -> Path:
    path.write_text(space_yaml())
    return path


def workload(seed: int, subscribers: int) -> Served:
    """The orders workload over `subscribers` queues of SUBS_PER_QUEUE subscriptions each."""
    return Served(orders.get(seed=seed, n_subs=subscribers * SUBS_PER_QUEUE, n_queues=subscribers))


class OrdersLedger(Ledger):
    """The demo's ledger on a typed workload: the orders as published, each checked against every
    subscription by the core's exact check (bluedove.lab.workloads.typed.matching)."""

    def __init__(self, served: Served, placed: list[dict[str, Any]], ids: list[str]) -> None:
        super().__init__(served, np.empty((len(placed), 0)), ids)
        self.orders = placed
        self.filters = served.typed.filters()

    def matches(self, idx: range) -> list[list[int]]:
        return matching(self.filters, self.orders[idx.start:idx.stop])

    def phase(self) -> str:
        return f"order {self.published}/{len(self.orders)}"


def order_bodies(placed: list[dict[str, Any]], ids: list[str]) -> list[dict[str, Any]]:
    """Orders as API messages: the attributes as drawn, the order's number in the payload."""
    return [{"id": mid, "attributes": attrs, "payload": {"order": k}}
            for k, (mid, attrs) in enumerate(zip(ids, placed))]


def plan(served: Served, n: int, seed: int, ids: list[str]) -> tuple[OrdersLedger, list[dict[str, Any]]]:
    """`n` orders (`messages(n, seed)`): their ledger and their bodies, in publishing order."""
    placed = served.typed.messages(n, seed=seed)
    return OrdersLedger(served, placed, ids), order_bodies(placed, ids)
