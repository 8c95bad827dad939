"""A local cluster as real processes: the library `bluedove up`, the lab's benches and the tests use."""

from bluedove.local.child import Child, bluedove_command
from bluedove.local.cluster import LocalCluster

__all__ = ["Child", "LocalCluster", "bluedove_command"]
