"""The flags of a local cluster, shared by `bluedove up` and the commands that start one (`demo`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from bluedove.core.forwarding import POLICIES
from bluedove.core.partition.modes import MODES
from bluedove.runtime import tls
from bluedove.runtime.extras import require

if TYPE_CHECKING:
    from bluedove.runtime.settings import TlsSettings

PARTITION_HELP = ("mpartition (BlueDove, the default) or a baseline of the paper's §IV-B: p2p, full-replication; "
                  "the same on every matcher and dispatcher (default BLUEDOVE_PARTITION, else mpartition)")


def add_cluster_flags(sp: argparse.ArgumentParser, http_port: int, grpc_port: int = 0) -> None:
    sp.add_argument("--matchers", type=int, default=4, help="matcher processes (default 4)")
    sp.add_argument("--dispatchers", type=int, default=1, help="dispatcher processes sharing the port")
    sp.add_argument("--http-port", type=int, default=http_port, help="REST port (0 = any free port)")
    sp.add_argument("--grpc-port", type=int, default=grpc_port, help="gRPC API port (0 = any free port)")
    sp.add_argument("--store", default=None,
                    help="redis://host:port/db, or redis+cluster://host:port,host:port for a Redis Cluster; "
                         "default: a private redis-server")
    sp.add_argument("--store-cluster", type=int, default=None, metavar="N",
                    help="instead of one private redis-server, a private Redis Cluster of N primaries with a "
                         "replica each (DATA_DIR/redis-cluster); a killed primary fails over only if N >= 3")
    sp.add_argument("--space", default=None,
                    help="space file, YAML or JSON: attributes and partition, or dimensions "
                         "(default: x0..x3 in [0, 1000))")
    sp.add_argument("--policy", choices=POLICIES, default="adaptive", help="forwarding policy")
    sp.add_argument("--partition", choices=MODES, default=None, help=PARTITION_HELP)


def store_flags_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the store flags (a usage error, exit 2), or None."""
    if args.store_cluster is None:
        return None
    if args.store is not None:
        return ("--store and --store-cluster exclude each other: --store names a running store, "
                "--store-cluster starts one")
    if args.store_cluster < 1:
        return f"--store-cluster {args.store_cluster}: expected 1 or more primaries"
    return None


def add_up_tls_flags(up: argparse.ArgumentParser) -> None:
    tls.add_flags(up, "every port of every process it starts (https:// and grpcs:// with a certificate)")
    up.add_argument("--tls", choices=("self-signed",), default=None,
                    help="self-signed: TLS with a private CA and a certificate for 127.0.0.1/localhost made in "
                         "DATA_DIR/tls (kept for the next run; clients trust DATA_DIR/tls/ca.pem); needs "
                         "pip install 'bluedove[tls]'")


def up_tls(args: argparse.Namespace) -> TlsSettings:
    """`up`'s TLS files (flags, else BLUEDOVE_TLS_*), checked; every process it starts gets them."""
    from bluedove.runtime.settings import TlsSettings, from_env

    if args.tls == "self-signed":
        if args.tls_cert or args.tls_key or args.tls_ca:
            raise tls.TlsError("--tls self-signed makes its own files: not with --tls-cert, --tls-key or --tls-ca")
        require("tls", "--tls self-signed")
        from bluedove.local.selfsigned import ensure

        files, made = ensure(Path(args.data_dir) / "tls")
        print(f"TLS         {'a new' if made else 'the'} self-signed CA {files.tls_ca} (clients: --tls-ca)", flush=True)
        return files
    files = from_env(TlsSettings, **tls.overrides(args))
    tls.check(files)
    return files


# `bluedove up`'s bounds flags -> the settings' environment variables (every matcher and dispatcher)
BOUNDS_FLAGS = {"max_undelivered": "BLUEDOVE_MAX_UNDELIVERED", "retention_s": "BLUEDOVE_RETENTION_S",
                "max_outstanding": "BLUEDOVE_MAX_OUTSTANDING", "max_queued": "BLUEDOVE_MAX_QUEUED"}


def add_bounds_flags(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--max-undelivered", type=int, default=None, metavar="N",
                    help="a new queue's cap on undelivered (not yet acked) deliveries unless it asks for another; "
                         "deliveries beyond it are refused for that queue (0 = no cap; default "
                         "BLUEDOVE_MAX_UNDELIVERED, else 100000)")
    sp.add_argument("--retention-s", type=int, default=None, metavar="S",
                    help="a new queue's retention unless it asks for another: older deliveries are dropped "
                         "(0 = kept until acked, the default; BLUEDOVE_RETENTION_S)")
    sp.add_argument("--max-outstanding", type=int, default=None, metavar="N",
                    help="backpressure: messages a dispatcher holds under way before it answers 503 "
                         "(default BLUEDOVE_MAX_OUTSTANDING, else 50000)")
    sp.add_argument("--max-queued", type=int, default=None, metavar="N",
                    help="backpressure: messages of one dimension a matcher queues before it refuses Forward "
                         "calls (default BLUEDOVE_MAX_QUEUED, else 20000)")


def bounds_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment the bounds flags give every matcher and dispatcher."""
    return {env: str(v) for name, env in BOUNDS_FLAGS.items() if (v := getattr(args, name, None)) is not None}
