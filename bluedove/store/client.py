"""The store's URL to a redis-py client: one server, or a Redis Cluster.

  redis://[user:pass@]host:port/db, rediss://…, unix://…      one server
  redis+cluster://[user:pass@]host:port[,host:port…][?wait=N&wait_ms=T]
  rediss+cluster://…                                          a cluster, over TLS

A cluster URL lists startup nodes (any of the cluster's nodes; the client learns the rest).
`wait=N` makes every delivery write wait until N replicas have it (Redis WAIT) before a
publish is answered, `wait_ms` at most that long (docs/operations.md, "A Redis Cluster").
A password may also come from BLUEDOVE_STORE_PASSWORD, used when the URL carries none.

Everything else in the store's code is the same for both kinds of client.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

PASSWORD_ENV = "BLUEDOVE_STORE_PASSWORD"
# How the services' clients decode replies: bytes that are not UTF-8 (a delivery stored before
# publishing refused them) arrive as lone surrogates instead of failing the whole reply, and
# encode back to the same bytes with the same handler. A poll finds them by its body failing
# strict encoding (bluedove/store/queues.py).
ENCODING_ERRORS = "surrogateescape"
# A redis-py client (one server's or a cluster's, sync or asyncio) made with decode_responses:
# redis-py types every reply `bytes | str` whatever that option says, so the store holds its
# clients untyped rather than cast each reply.
RedisClient = Any
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")


class StoreUrlError(ValueError):
    """The store URL cannot be used (says what is wrong with it)."""


@dataclass(frozen=True)
class ClusterUrl:
    """A parsed cluster URL: startup nodes, TLS, credentials, and the WAIT settings."""

    nodes: list[tuple[str, int]]
    tls: bool
    username: str | None
    password: str | None
    wait_replicas: int
    wait_ms: int


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


def parse_cluster_url(url: str) -> ClusterUrl:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in CLUSTER_SCHEMES:
        raise StoreUrlError(f"{url!r}: a cluster URL starts with redis+cluster:// or rediss+cluster://")
    netloc, _, tail = rest.partition("/")
    path, _, query = tail.partition("?")
    if "?" in netloc:
        netloc, _, query = netloc.partition("?")
    if path not in ("", "0"):
        raise StoreUrlError(f"{url!r}: a Redis Cluster has only database 0")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if colon else None
    nodes = []
    for part in hosts.split(","):
        split = urlsplit(f"//{part}")
        try:
            port = split.port
        except ValueError:
            port = None
        if not split.hostname or port is None:
            raise StoreUrlError(f"{url!r}: {part!r} is not host:port")
        nodes.append((split.hostname, port))
    params = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(params) - {"wait", "wait_ms"})
    if unknown:
        raise StoreUrlError(f"{url!r}: unknown option {unknown[0]!r} (known: wait, wait_ms)")
    try:
        wait = int(params.get("wait", ["0"])[-1])
        wait_ms = int(params.get("wait_ms", ["1000"])[-1])
    except ValueError:
        raise StoreUrlError(f"{url!r}: wait and wait_ms are whole numbers") from None
    if wait < 0 or wait_ms < 1:
        raise StoreUrlError(f"{url!r}: wait must be >= 0 and wait_ms >= 1")
    return ClusterUrl(nodes, scheme.lower().startswith("rediss"), username,
                      password if password is not None else os.environ.get(PASSWORD_ENV) or None, wait, wait_ms)


def _once_more() -> dict[str, Any]:
    """A command that meets a broken connection goes once more, at once, on a new one. After
    the server restarts, every connection the pool kept from before is broken, and each would
    otherwise fail its next command (a 503 for a request made after Redis was back). redis-py
    retries no connection error unless told to. Timeouts are not retried: the command may
    have run. (A Redis Cluster client retries by itself, finding the slot's node again.)"""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError

    return {"retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
            "retry_on_error": [RedisConnectionError]}


def _password_kw(url: str) -> dict[str, Any]:
    """The environment's password for a one-server URL that has none."""
    env = os.environ.get(PASSWORD_ENV)
    return {"password": env} if env and urlsplit(url).password is None else {}


def async_client(url: str, connection_class: type | None = None, **kw: Any) -> RedisClient:
    """redis.asyncio.Redis or redis.asyncio.RedisCluster for `url` (decode_responses on, with
    ENCODING_ERRORS); `connection_class` for a plain redis:// server's connections."""
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    from bluedove.store.wire import ClusterConnection, ClusterSSLConnection

    kw.setdefault("decode_responses", True)
    kw.setdefault("encoding_errors", ENCODING_ERRORS)
    if not is_cluster_url(url):
        plain = {"connection_class": connection_class} if connection_class and url.startswith("redis://") else {}
        return aioredis.from_url(url, **_password_kw(url), **plain, **_once_more(), **kw)
    c = parse_cluster_url(url)
    extra: dict[str, Any] = {"ssl": True} if c.tls else {}
    rc = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in c.nodes], username=c.username,
                      password=c.password, **extra, **kw)
    # RedisCluster takes no connection_class: its nodes' connections are made from these
    # (shared by the nodes it discovers later), before any is made.
    conn = ClusterSSLConnection if c.tls else ClusterConnection
    rc.nodes_manager.connection_kwargs["connection_class"] = conn
    for node in (*rc.startup_nodes, *rc.nodes_manager.startup_nodes.values()):
        node.connection_class = conn
    return rc


def node_client(url: str, attempt: int = 0, **kw: Any) -> RedisClient:
    """A redis.asyncio.Redis for one server: the URL's, or on a cluster the startup node
    `attempt` picks (round robin, so retries walk the nodes). For what one connection to any
    node serves, such as a subscription to a channel."""
    import redis.asyncio as aioredis

    kw.setdefault("decode_responses", True)
    kw.setdefault("encoding_errors", ENCODING_ERRORS)
    if not is_cluster_url(url):
        return aioredis.from_url(url, **_password_kw(url), **kw)
    c = parse_cluster_url(url)
    host, port = c.nodes[attempt % len(c.nodes)]
    return aioredis.Redis(host=host, port=port, username=c.username, password=c.password, ssl=c.tls, **kw)


def sync_client(url: str, **kw: Any) -> RedisClient:
    """redis.Redis or redis.cluster.RedisCluster for `url` (decode_responses on): for tools
    and tests."""
    import redis
    from redis.cluster import ClusterNode, RedisCluster

    kw.setdefault("decode_responses", True)
    if not is_cluster_url(url):
        return redis.Redis.from_url(url, **_password_kw(url), **kw)
    c = parse_cluster_url(url)
    nodes = [ClusterNode(h, p) for h, p in c.nodes]  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
    return RedisCluster(startup_nodes=nodes, username=c.username, password=c.password, ssl=c.tls, **kw)


def wait_settings(url: str) -> tuple[int, int]:
    """(replicas a delivery write waits for, how long at most in ms) by the URL; (0, 0) for
    one server."""
    if not is_cluster_url(url):
        return 0, 0
    c = parse_cluster_url(url)
    return c.wait_replicas, c.wait_ms
