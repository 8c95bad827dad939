"""API keys on the dispatcher: who may publish and manage queues, and how fast (docs/api.md, "API keys").

With `auth = "keys"`, publishing needs a key with scope `publish`; creating a queue, subscribing
and deleting a queue or subscription need `subscribe` (`admin` implies both). The key comes in
`Authorization: Bearer bdk_…` (gRPC: the `authorization` metadata); an operation on an existing
queue carries that queue's token in `X-Queue-Token` (gRPC: `x-queue-token`). Queue reads (poll,
ack, Listen, GET subscription) take the queue token in `Authorization`, as without keys.

No store call per request: verified keys are cached, and the store's key generation (bumped by
every create and revoke) is read every `auth_refresh_s`; when it moves, the cache is dropped.
A cache whose last read is older than STALE_S is not trusted (each key is read again), so a
dispatcher cut off from the store cannot go on accepting a revoked key. Rate limits: each key's
buckets here hold 1/N of its rates, N the dispatchers registered in the store (re-read with the
dispatcher's heartbeat, every 3 s).
"""

from __future__ import annotations

import asyncio
import logging
import time

from bluedove.core.apikeys import KeyRecord, split_key, verify
from bluedove.core.errors import ApiError
from bluedove.dispatcher.ratelimit import KeyLimit, retry_after
from bluedove.store.apikeys import KeyStore
from bluedove.store.store import DispatcherStore

log = logging.getLogger("bluedove.dispatcher.auth")

STALE_S = 1.0
MAX_CACHED = 100_000  # keys (and unknown ids) remembered between two generations


def key_unauthorized() -> ApiError:
    return ApiError(401, "unauthorized", "a valid API key is required (Authorization: Bearer bdk_…)")


def insufficient_scope(scope: str) -> ApiError:
    return ApiError(403, "forbidden", f"insufficient_scope: this operation needs an API key with scope {scope!r}",
                    headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{scope}"'})


def rate_limited(wait_s: float, what: str) -> ApiError:
    after = retry_after(wait_s)
    return ApiError(429, "rate_limited", f"this API key is over its {what} rate; retry in {after} s",
                    headers={"Retry-After": str(after)})


def parse_bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value (REST header or gRPC metadata);
    None when there is none or the scheme is another."""
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class KeyAuth:
    """One dispatcher's view of the keys: cached records, generation watch, rate buckets."""

    def __init__(self, store: DispatcherStore, refresh_s: float = 0.25) -> None:
        self.keys = KeyStore(store.r)
        self.store = store
        self.refresh_s = refresh_s
        self.cache: dict[str, KeyRecord | None] = {}  # id -> record (None: no such key)
        # `Authorization` values already verified -> their key. A hit skips parsing and hashing
        # (the hot path: ~1 µs instead of ~5). Looked up by the whole presented value, whose
        # hash (SipHash, seeded per process) an outsider cannot steer to collide with a cached
        # key's: a wrong secret misses without a comparison against any stored secret.
        self.verified: dict[str, KeyRecord] = {}
        self.limits: dict[str, KeyLimit] = {}
        self.gen: int | None = None
        self.fresh_at = 0.0  # monotonic time of the last generation read
        self.share = 1.0  # this dispatcher's share, 1/N: set by its heartbeat (bluedove/dispatcher/dispatcher.py)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception as exc:  # noqa: BLE001 - the store may be briefly away: the cache goes stale
                log.warning("could not read the API key generation: %r", exc)
            await asyncio.sleep(self.refresh_s)

    async def refresh(self) -> None:
        gen = await self.keys.generation()
        if gen != self.gen:
            self.cache.clear()
            self.verified.clear()
            # The rate buckets stay: a key's limits never change (a new key replaces it), and
            # refilling every key's buckets on any key's creation or revocation would let each
            # key publish a fresh burst whenever keys are managed. A revoked key's bucket is
            # never reached again (its requests end in 401); `admit` bounds their number.
            self.gen = gen
        self.fresh_at = time.monotonic()

    async def record(self, key_id: str) -> KeyRecord | None:
        if time.monotonic() - self.fresh_at > STALE_S:
            return await self.keys.get(key_id)  # not trusted: ask the store (503 if it is away)
        if key_id in self.cache:
            return self.cache[key_id]
        gen = self.gen
        rec = await self.keys.get(key_id)
        # Kept only if no generation change came while we read: else it may predate a revoke.
        if self.gen == gen:
            if len(self.cache) >= MAX_CACHED:
                self.cache.clear()
            self.cache[key_id] = rec
        return rec

    async def require(self, authorization: str | None, scope: str, space: str | None = None) -> KeyRecord:
        """The key of an `Authorization` value if it is valid, has `scope` and may use `space`
        (None: an operation in no space, a queue's); else 401 / 403."""
        rec = self.verified.get(authorization) if authorization else None
        if rec is not None and time.monotonic() - self.fresh_at <= STALE_S:
            return allowed(rec, scope, space)
        parts = split_key(parse_bearer(authorization))
        if parts is None or authorization is None:  # (no value: parts is None too)
            raise key_unauthorized()
        gen = self.gen
        rec = await self.record(parts[0])
        if not verify(rec, parts[1]):
            raise key_unauthorized()
        assert rec is not None  # verify accepts no missing key
        if self.gen == gen and time.monotonic() - self.fresh_at <= STALE_S:
            if len(self.verified) >= MAX_CACHED:
                self.verified.clear()
            self.verified[authorization] = rec
        return allowed(rec, scope, space)

    def admit(self, rec: KeyRecord, n_msgs: int, n_bytes: int) -> None:
        """Take a publish of n messages and bytes from the key's buckets, or 429 taking nothing."""
        if not (rec.rate_msgs or rec.rate_bytes):
            return
        now = time.monotonic()
        lim = self.limits.get(rec.id)
        if lim is None:
            if len(self.limits) >= MAX_CACHED:
                self.limits.clear()
            lim = self.limits[rec.id] = KeyLimit(rec.rate_msgs, rec.rate_bytes, rec.burst_msgs, rec.burst_bytes,
                                                 now, self.share)
        else:
            lim.set_share(self.share, now)
        wait = lim.admit(n_msgs, n_bytes, now)
        if wait > 0:
            raise rate_limited(wait, "message" if lim.msgs and lim.msgs.wait(n_msgs, now) > 0 else "byte")


def allowed(rec: KeyRecord, scope: str, space: str | None) -> KeyRecord:
    """`rec` if it has `scope` and may use `space` (None: no space to check); else 403."""
    if not rec.allows(scope):
        raise insufficient_scope(scope)
    if space is not None and not rec.in_space(space):
        raise ApiError(403, "forbidden", f"the API key may not use the space {space!r} (it may use "
                       f"{', '.join(repr(n) for n in rec.spaces)})", "space")
    return rec


async def caller(auth: KeyAuth | None, authorization: str | None, scope: str,
                 space: str | None = None) -> KeyRecord | None:
    """The request's key when the dispatcher checks keys (`auth`; None when auth is off); `space`
    the space the operation is in (None: a queue's, in no space)."""
    return None if auth is None else await auth.require(authorization, scope, space)


def queue_token(auth: KeyAuth | None, authorization: str | None, x_queue_token: str | None) -> str | None:
    """The queue token of a managing request (subscribe to, delete a queue or subscription):
    `Authorization: Bearer` without keys; `X-Queue-Token` with keys, as Authorization holds the key."""
    return parse_bearer(authorization) if auth is None else (x_queue_token or "").strip() or None
