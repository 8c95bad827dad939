"""The flags of a local cluster, shared by `bluedove up` and the commands that start one (`demo`)."""

from __future__ import annotations

import argparse

from bluedove.forwarding import POLICIES
from bluedove.partitioning import MODES

PARTITION_HELP = ("mpartition (BlueDove, the default) or a baseline of the paper's §IV-B: p2p, full-replication; "
                  "the same on every matcher and dispatcher (default BLUEDOVE_PARTITION, else mpartition)")


def add_cluster_flags(sp: argparse.ArgumentParser, http_port: int, grpc_port: int = 0) -> None:
    sp.add_argument("--matchers", type=int, default=4, help="matcher processes (default 4)")
    sp.add_argument("--dispatchers", type=int, default=1, help="dispatcher processes sharing the port")
    sp.add_argument("--http-port", type=int, default=http_port, help="REST port (0 = any free port)")
    sp.add_argument("--grpc-port", type=int, default=grpc_port, help="gRPC API port (0 = any free port)")
    sp.add_argument("--store", default=None, help="redis://host:port/db; default: a private redis-server")
    sp.add_argument("--space", default=None, help="YAML space file (default: x0..x3 in [0, 1000))")
    sp.add_argument("--policy", choices=POLICIES, default="adaptive", help="forwarding policy")
    sp.add_argument("--partition", choices=MODES, default=None, help=PARTITION_HELP)
