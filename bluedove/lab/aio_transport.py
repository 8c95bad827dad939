"""The load generators' REST transports on aiohttp: the SDK's `poll` and `ack` (the pollers), and
its queue and subscription calls (the subscribers and the churner), answers decoded and errors
typed by the SDK (bluedove.client.http.decode), at a quarter of httpx's CPU per request.

The delivery bench's pollers share two cores with the cluster they drain: a poll and its ack
cost 1.7 ms and 1.2 ms of CPU through httpx on this machine, 0.6 ms and 0.4 ms through aiohttp
(60 deliveries a poll; docs/benchmarks.md, "Delivery")."""

from __future__ import annotations

import asyncio

import aiohttp

from bluedove.client.errors import Unavailable
from bluedove.client.http import LISTEN_WAIT_S, decode


class AioHttpTransport:
    """`connections` keep-alive connections to `url`; create and close it inside the event loop."""

    def __init__(self, url: str, connections: int, timeout_s: float = 30.0) -> None:
        self.url = url
        # idle connections are dropped before the server drops them (uvicorn: after 5 s)
        connector = aiohttp.TCPConnector(limit=connections, keepalive_timeout=2.0)
        timeout = aiohttp.ClientTimeout(total=timeout_s + LISTEN_WAIT_S, connect=timeout_s)
        self.session = aiohttp.ClientSession(url, connector=connector, timeout=timeout)

    async def close(self) -> None:
        await self.session.close()

    async def _do(self, method: str, path: str, token: str, **kw) -> dict | None:
        try:
            async with self.session.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kw) as r:
                return decode(r.status, await r.read(), r.reason or "")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise Unavailable("unavailable", f"cannot reach {self.url}: {exc!r}") from exc

    async def poll(self, queue: str, token: str, max_n: int, wait: float) -> list[dict]:
        params = {"max": str(max_n), "wait": str(wait)}
        return (await self._do("GET", f"/v1/queues/{queue}/messages", token, params=params))["messages"]

    async def ack(self, queue: str, token: str, receipts: list[str]) -> None:
        await self._do("POST", f"/v1/queues/{queue}/ack", token, json={"receipts": receipts})


class SubscribeTransport(AioHttpTransport):
    """The SDK's REST queue and subscription calls."""

    async def create_queue(self) -> dict:
        return await self._do("POST", "/v1/queues", "")

    async def subscribe(self, body: dict, token: str) -> dict:
        return await self._do("POST", "/v1/subscriptions", token, json=body)

    async def subscribe_batch(self, bodies: list[dict], token: str) -> list[dict]:
        return (await self._do("POST", "/v1/subscriptions:batch", token,
                               json={"subscriptions": bodies}))["subscriptions"]

    async def unsubscribe(self, sub_id: str, token: str) -> None:
        await self._do("DELETE", f"/v1/subscriptions/{sub_id}", token)
