"""A local cluster as real processes: the library `bluedove up`, the lab's benches and the tests use."""

from bluedove.local.cluster import Child, LocalCluster, bluedove_command

__all__ = ["Child", "LocalCluster", "bluedove_command"]
