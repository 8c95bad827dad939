"""What goes over the wire to and from Redis: commands packed in C, and the REST body of
deliveries spliced from their stored JSON."""

from __future__ import annotations

from collections.abc import Iterable

import hiredis
import redis.asyncio as aioredis
import redis.exceptions
from redis.typing import EncodableT


class WriteFailsAsConnectionError:
    """A connection whose write on a transport torn down meanwhile (the peer closed it, or a
    concurrent failure disconnected the connection) raises ConnectionError. redis-py lets
    asyncio's internals raise AttributeError or TypeError there instead (`'NoneType' object has
    no attribute 'writelines'`), which neither its retries nor the dispatcher's store-error
    handling know: a long poll answered 500 while a Redis Cluster primary failed over. As a
    ConnectionError it is retried once on a new connection, or answered 503 (retry)."""

    async def send_packed_command(self, command: bytes | str | Iterable[bytes], check_health: bool = True) -> None:
        try:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
        except (AttributeError, TypeError) as exc:  # only writing happens here: the transport is gone
            raise redis.exceptions.ConnectionError(f"the connection closed while writing: {exc}") from exc


class ClusterConnection(WriteFailsAsConnectionError, aioredis.Connection):
    """A Redis Cluster node's connection (bluedove/store/client.py)."""


class ClusterSSLConnection(WriteFailsAsConnectionError, aioredis.SSLConnection):
    """A Redis Cluster node's connection over TLS."""


class PackedConnection(WriteFailsAsConnectionError, aioredis.Connection):
    """redis-py's asyncio connection with commands packed by hiredis in C, as its sync client
    does: the same bytes, ~9x cheaper for a matcher's DELIVER call of ~1,700 arguments
    (5.6 -> 0.6 µs per message). Anything but str, bytes, int and float takes redis-py's path."""

    _PLAIN = frozenset((str, bytes, int, float))

    def pack_command(self, *args: EncodableT) -> list[bytes]:
        types = set(map(type, args))
        if not types <= self._PLAIN or type(args[0]) is float:
            return super().pack_command(*args)
        if isinstance(args[0], str):  # "SCRIPT LOAD" and the like go as separate words
            args = (*args[0].encode().split(), *args[1:])
        elif isinstance(args[0], bytes) and b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        if float in types:  # formatted as redis-py does
            args = tuple(repr(a) if type(a) is float else a for a in args)
        return [hiredis.pack_command(args)]  # type: ignore[arg-type]  # its stub says a 1-tuple: any length goes


def deliveries_json(raw: list[tuple[str, str, str]], tag: str) -> str:
    """`{"messages": [...]}` for deliveries [(entry id, message JSON, subscriptions JSON)] of
    the queue whose receipts end with `tag` (bluedove/store/ids.py, `receipt_tag`), spliced from
    the stored JSON texts (each message object gains its subscriptions and receipt) without
    decoding them: what the POLL script does in Redis, for the entries a blocking read hands out."""
    parts = []
    for eid, message, subs in raw:
        head = message.rstrip()[:-1].rstrip()  # the object without its closing brace
        sep = "" if head.endswith("{") else ","
        parts.append(f'{head}{sep}"subscriptions":{subs},"receipt":"{eid}{tag}"}}')
    return '{"messages":[' + ",".join(parts) + "]}"
