"""The store: Redis holds the catalogue, delivery queues, dedup keys and queue tokens."""

from bluedove.store.store import Store

__all__ = ["Store"]
