"""A write on a connection whose transport was torn down meanwhile is a ConnectionError (what
the store's retries and the dispatcher's 503 know), not the AttributeError asyncio's internals
raise there; the Redis Cluster client's nodes make such connections too."""

from __future__ import annotations

import asyncio

import pytest
import redis.exceptions

from bluedove.store.client import async_client
from bluedove.store.wire import ClusterConnection, ClusterSSLConnection, PackedConnection


class TornDown:
    """A stream writer over a transport the peer closed: asyncio's internals fail as they do then."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def writelines(self, data) -> None:
        raise self.error

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass

    async def wait_closed(self) -> None:
        pass


@pytest.mark.parametrize("cls", [PackedConnection, ClusterConnection])
@pytest.mark.parametrize("error", [TypeError("'NoneType' object is not callable"),
                                   AttributeError("'NoneType' object has no attribute '_add_writer'")])
def test_a_write_on_a_torn_down_transport_is_a_connection_error(cls, error):
    async def run() -> None:
        conn = cls(host="127.0.0.1", port=1)
        conn._reader, conn._writer = asyncio.StreamReader(), TornDown(error)
        with pytest.raises(redis.exceptions.ConnectionError, match="closed while writing"):
            await conn.send_packed_command(b"PING\r\n", check_health=False)
        assert not conn.is_connected  # dropped: the retry takes a new one

    asyncio.run(run())


@pytest.mark.parametrize("url,cls", [("redis+cluster://127.0.0.1:1,127.0.0.1:2", ClusterConnection),
                                     ("rediss+cluster://127.0.0.1:1", ClusterSSLConnection)])
def test_a_cluster_client_s_nodes_make_such_connections(url, cls):
    rc = async_client(url)
    assert rc.nodes_manager.connection_kwargs["connection_class"] is cls
    assert {n.connection_class for n in rc.nodes_manager.startup_nodes.values()} == {cls}
