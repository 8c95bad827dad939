"""REST transports (httpx), sync and asyncio: each call returns the API's JSON or raises typed."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast
from urllib.parse import quote

import httpx

from bluedove.client.errors import Unavailable, api_error
from bluedove.client.transport import Json

# The fields of an answer are cast to the types the API gives them (docs/api.md).

# Long-polls of listen() over REST (seconds; the API allows up to 20).
LISTEN_WAIT_S = 20


def _auth(token: str | None, api_key: str | None = None) -> dict[str, str]:
    """Without a key: the queue token in Authorization. With one (a managing call of a client
    given `api_key`): the key in Authorization, the queue token in X-Queue-Token."""
    if api_key:
        return {"Authorization": f"Bearer {api_key}", **({"X-Queue-Token": token} if token else {})}
    return {"Authorization": f"Bearer {token}"} if token else {}


def decode(status: int, content: bytes, reason: str) -> Json | None:
    """An answer's JSON, or the typed error it carries (for any HTTP client)."""
    if status < 400:
        answer: Json | None = json.loads(content) if content else None
        return answer
    try:
        err = json.loads(content)["error"]
        raise api_error(status, err.get("code"), err.get("message", ""), err.get("field"))
    except (ValueError, KeyError, TypeError):
        raise api_error(status, None, content[:200].decode(errors="replace") or reason) from None


def _check(r: httpx.Response) -> Json:
    """The answer's JSON object ({} when it has none: a 204), or the typed error it carries."""
    try:
        return decode(r.status_code, r.content, r.reason_phrase) or {}
    except Unavailable as exc:
        try:
            exc.retry_after_s = float(r.headers["retry-after"])
        except (KeyError, ValueError):
            pass
        raise


def _queue_body(retain_acked_s: int) -> dict[str, Any]:
    """The request arguments of POST /v1/queues: no body for the default bounds."""
    return {"json": {"retain_acked_s": retain_acked_s}} if retain_acked_s else {}


def _base(space: str | None) -> str:
    """Where a space's publish and subscribe routes are: /v1, or /v1/spaces/{space}."""
    return "/v1" if space is None else f"/v1/spaces/{quote(space, safe='')}"


def _verify(tls_ca: str | None) -> ssl.SSLContext | bool:
    """httpx's `verify` for https://: a context trusting the CA file's roots, else True (the
    system's). No client certificate: the public ports ask for none (docs/security.md, "TLS")."""
    if not tls_ca:
        return True
    return ssl.create_default_context(cafile=tls_ca)


class HttpTransport:
    """The blocking REST transport: one httpx.Client on the API's base URL."""

    def __init__(self, url: str, timeout_s: float, api_key: str | None = None, *, tls_ca: str | None = None) -> None:
        self.api_key = api_key
        # The long-poll wait rides on top of the timeout.
        self.h = httpx.Client(base_url=url, timeout=httpx.Timeout(timeout_s + LISTEN_WAIT_S, connect=timeout_s),
                              verify=_verify(tls_ca))

    def close(self) -> None:
        self.h.close()

    def _do(self, method: str, path: str, token: str | None = None, api_key: str | None = None,
            **kw: Any) -> Json:
        try:
            r = self.h.request(method, path, headers=_auth(token, api_key), **kw)
        except httpx.TransportError as exc:
            raise Unavailable("unavailable", f"cannot reach {self.h.base_url}: {exc!r}") from exc
        return _check(r)

    def _manage(self, method: str, path: str, token: str | None = None, **kw: Any) -> Json:
        """A call that carries the API key (publish, create, subscribe, delete); reads do not."""
        return self._do(method, path, token, self.api_key, **kw)

    def space(self) -> Json:
        return self._do("GET", "/v1/space")

    def spaces(self) -> list[Json]:
        return cast(list[Json], self._do("GET", "/v1/spaces")["spaces"])

    def space_info(self, name: str) -> Json:
        return self._do("GET", f"/v1/spaces/{quote(name, safe='')}")

    def create_space(self, spec: Json) -> Json:
        return self._manage("POST", "/v1/spaces", json=spec)

    def delete_space(self, name: str) -> None:
        self._manage("DELETE", f"/v1/spaces/{quote(name, safe='')}")

    def create_queue(self, retain_acked_s: int = 0) -> Json:
        return self._manage("POST", "/v1/queues", **_queue_body(retain_acked_s))

    def delete_queue(self, queue: str, token: str) -> None:
        self._manage("DELETE", f"/v1/queues/{queue}", token)

    def subscribe(self, body: Json, token: str | None, space: str | None = None) -> Json:
        return self._manage("POST", f"{_base(space)}/subscriptions", token, json=body)

    def subscribe_batch(self, bodies: list[Json], token: str | None, space: str | None = None) -> list[Json]:
        answer = self._manage("POST", f"{_base(space)}/subscriptions:batch", token, json={"subscriptions": bodies})
        return cast(list[Json], answer["subscriptions"])

    def get_subscription(self, sub_id: str, token: str) -> Json:
        return self._do("GET", f"/v1/subscriptions/{sub_id}", token)

    def unsubscribe(self, sub_id: str, token: str) -> None:
        self._manage("DELETE", f"/v1/subscriptions/{sub_id}", token)

    def update_subscription(self, sub_id: str, body: Json, token: str) -> Json:
        return self._manage("PUT", f"/v1/subscriptions/{sub_id}", token, json=body)

    def publish(self, body: Json, space: str | None = None) -> str:
        return cast(str, self._manage("POST", f"{_base(space)}/messages", json=body)["id"])

    def publish_batch(self, bodies: list[Json], space: str | None = None) -> list[str]:
        return cast(list[str], self._manage("POST", f"{_base(space)}/messages:batch", json={"messages": bodies})["ids"])

    def poll(self, queue: str, token: str, max_n: int, wait: float) -> list[Json]:
        answer = self._do("GET", f"/v1/queues/{queue}/messages", token, params={"max": max_n, "wait": wait})
        return cast(list[Json], answer["messages"])

    def ack(self, queue: str, token: str, receipts: list[str]) -> None:
        self._do("POST", f"/v1/queues/{queue}/ack", token, json={"receipts": receipts})

    def seek(self, queue: str, token: str, body: Json) -> int:
        return int(self._do("POST", f"/v1/queues/{queue}/seek", token, json=body)["redeliverable"])

    def listen(self, queue: str, token: str, max_n: int) -> Iterator[Json]:
        """Deliveries as long-polls bring them; the caller reconnects on Unavailable."""
        while True:
            yield from self.poll(queue, token, max_n, LISTEN_WAIT_S)


class AsyncHttpTransport:
    """The asyncio REST transport: one httpx.AsyncClient on the API's base URL."""

    def __init__(self, url: str, timeout_s: float, *, limits: httpx.Limits | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, api_key: str | None = None,
                 tls_ca: str | None = None) -> None:
        """`limits`: the connection pool's (httpx's default without); `transport`: another
        than the network's (tests pass an httpx.MockTransport)."""
        pool: dict[str, Any] = {"limits": limits} if limits is not None else {}  # else httpx's default
        self.api_key = api_key
        self.h = httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(timeout_s + LISTEN_WAIT_S, connect=timeout_s),
                                   transport=transport, verify=_verify(tls_ca), **pool)

    async def close(self) -> None:
        await self.h.aclose()

    async def _do(self, method: str, path: str, token: str | None = None, headers: dict[str, str] | None = None,
                  api_key: str | None = None, **kw: Any) -> Json:
        try:
            r = await self.h.request(method, path, headers={**_auth(token, api_key), **(headers or {})}, **kw)
        except httpx.TransportError as exc:
            raise Unavailable("unavailable", f"cannot reach {self.h.base_url}: {exc!r}") from exc
        return _check(r)

    async def _manage(self, method: str, path: str, token: str | None = None, **kw: Any) -> Json:
        """A call that carries the API key (publish, create, subscribe, delete); reads do not."""
        return await self._do(method, path, token, api_key=self.api_key, **kw)

    async def space(self) -> Json:
        return await self._do("GET", "/v1/space")

    async def spaces(self) -> list[Json]:
        return cast(list[Json], (await self._do("GET", "/v1/spaces"))["spaces"])

    async def space_info(self, name: str) -> Json:
        return await self._do("GET", f"/v1/spaces/{quote(name, safe='')}")

    async def create_space(self, spec: Json) -> Json:
        return await self._manage("POST", "/v1/spaces", json=spec)

    async def delete_space(self, name: str) -> None:
        await self._manage("DELETE", f"/v1/spaces/{quote(name, safe='')}")

    async def create_queue(self, retain_acked_s: int = 0) -> Json:
        return await self._manage("POST", "/v1/queues", **_queue_body(retain_acked_s))

    async def delete_queue(self, queue: str, token: str) -> None:
        await self._manage("DELETE", f"/v1/queues/{queue}", token)

    async def subscribe(self, body: Json, token: str | None, space: str | None = None) -> Json:
        return await self._manage("POST", f"{_base(space)}/subscriptions", token, json=body)

    async def subscribe_batch(self, bodies: list[Json], token: str | None, space: str | None = None) -> list[Json]:
        answer = await self._manage("POST", f"{_base(space)}/subscriptions:batch", token,
                                    json={"subscriptions": bodies})
        return cast(list[Json], answer["subscriptions"])

    async def get_subscription(self, sub_id: str, token: str) -> Json:
        return await self._do("GET", f"/v1/subscriptions/{sub_id}", token)

    async def unsubscribe(self, sub_id: str, token: str) -> None:
        await self._manage("DELETE", f"/v1/subscriptions/{sub_id}", token)

    async def update_subscription(self, sub_id: str, body: Json, token: str) -> Json:
        return await self._manage("PUT", f"/v1/subscriptions/{sub_id}", token, json=body)

    async def publish(self, body: Json, space: str | None = None) -> str:
        return cast(str, (await self._manage("POST", f"{_base(space)}/messages", json=body))["id"])

    async def publish_batch(self, bodies: list[Json], space: str | None = None) -> list[str]:
        answer = await self._manage("POST", f"{_base(space)}/messages:batch", json={"messages": bodies})
        return cast(list[str], answer["ids"])

    async def publish_encoded(self, batch: bytes) -> list[str]:
        """A batch already encoded as `{"messages": [...]}` JSON (a load generator prepares its
        requests ahead, so that its CPU goes to sending them)."""
        answer = await self._manage("POST", "/v1/messages:batch", content=batch,
                                    headers={"Content-Type": "application/json"})
        return cast(list[str], answer["ids"])

    async def cluster(self, timeout_s: float | None = None) -> Json:
        """GET /v1/cluster: the members, their segments and loads (what the dashboard shows)."""
        return await self._do("GET", "/v1/cluster", timeout=timeout_s if timeout_s else httpx.USE_CLIENT_DEFAULT)

    async def poll(self, queue: str, token: str, max_n: int, wait: float) -> list[Json]:
        answer = await self._do("GET", f"/v1/queues/{queue}/messages", token, params={"max": max_n, "wait": wait})
        return cast(list[Json], answer["messages"])

    async def ack(self, queue: str, token: str, receipts: list[str]) -> None:
        await self._do("POST", f"/v1/queues/{queue}/ack", token, json={"receipts": receipts})

    async def seek(self, queue: str, token: str, body: Json) -> int:
        return int((await self._do("POST", f"/v1/queues/{queue}/seek", token, json=body))["redeliverable"])

    async def listen(self, queue: str, token: str, max_n: int) -> AsyncIterator[Json]:
        while True:
            for m in await self.poll(queue, token, max_n, LISTEN_WAIT_S):
                yield m
