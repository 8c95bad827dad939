"""Gossip seeds found by DNS: a Kubernetes headless Service lists every matcher pod.

`--peers-dns NAME[:PORT]` names such a Service (`bluedove-matcher-headless.NS.svc:7001`). Its A
and AAAA records are the pods' addresses, ready or not when the Service publishes not-ready
addresses, so a pod finds the others before it has segments of its own. A name that does not
resolve yet (the first pod of a StatefulSet, or DNS still catching up) gives no seeds: the
caller resolves again later.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, cast

from bluedove.gossip.state import Node

DEFAULT_PORT = 7001
log = logging.getLogger("bluedove.gossip")


class AddrInfoResolver(Protocol):
    """`socket.getaddrinfo` as `resolve_peers` calls it: (family, type, proto, canonname, sockaddr)s."""

    def __call__(self, host: str, port: int, *, type: int  # noqa: A002 - getaddrinfo's keyword
                 ) -> Sequence[tuple[object, object, object, object, tuple[str | int | bytes, ...]]]: ...


class PeersSpecError(ValueError):
    """A `--peers-dns` value that is not NAME or NAME:PORT."""


def parse_spec(spec: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """`NAME[:PORT]` → (name, port). An IPv6 literal needs brackets: `[::1]:7001`."""
    spec = spec.strip()
    if not spec:
        raise PeersSpecError("empty DNS name")
    if spec.startswith("["):
        host, sep, rest = spec[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise PeersSpecError(f"{spec!r}: expected [IPV6]:PORT")
        port_text = rest[1:] if rest else ""
    else:
        host, sep, port_text = spec.rpartition(":")
        if not sep:
            host, port_text = spec, ""
    if not host:
        raise PeersSpecError(f"{spec!r}: no name before the port")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise PeersSpecError(f"{spec!r}: port must be a number from 1 to 65535")
    return host, int(port_text)


def format_address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def resolve_peers(spec: str, default_port: int = DEFAULT_PORT,
                  resolver: AddrInfoResolver = socket.getaddrinfo) -> list[str]:
    """Every address `spec` resolves to, as sorted `HOST:PORT` strings; [] if it does not resolve."""
    host, port = parse_spec(spec, default_port)
    try:
        infos = resolver(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    # A stream socket's address for a name is (host, port, ...): the host is an IP string.
    return sorted({format_address(cast(str, info[4][0]), port) for info in infos})


def heard_from_peer(node: Node) -> bool:
    """Some other live member has been heard from (not merely expected from the table)."""
    return any(e.generation > 0 and not e.gone for i, e in node.members.items() if i != node.id)


class DnsSeeds:
    """A gossip node's seeds: fixed addresses (the table's members, `--join`) and what a
    `--peers-dns` name resolves to, resolved again every `retry_s` while the node has heard
    from no other member (the first pods of a StatefulSet start before DNS lists them)."""

    def __init__(self, node: Node, spec: str = "", fixed: Iterable[str] = (), retry_s: float = 1.0,
                 resolver: Callable[[str], list[str]] = resolve_peers) -> None:
        self.node = node
        self.spec = spec
        self.retry_s = retry_s
        self.resolver = resolver
        self.fixed: tuple[str, ...] = tuple(fixed)
        self.found: list[str] = []
        self.reseed()

    def reseed(self, fixed: Iterable[str] | None = None) -> None:
        """Set the node's seeds, with new fixed addresses if given; never the node's own."""
        if fixed is not None:
            self.fixed = tuple(fixed)
        self.node.seeds = tuple(dict.fromkeys(a for a in [*self.fixed, *self.found] if a and a != self.node.addr))

    async def run(self) -> None:
        while self.spec:
            if not heard_from_peer(self.node):
                try:
                    self.found = await asyncio.to_thread(self.resolver, self.spec)
                except Exception:
                    log.exception("resolving --peers-dns %s failed", self.spec)
                    self.found = []
                self.reseed()
            await asyncio.sleep(self.retry_s)
