"""bluedove/dispatcher/auth.py's KeyAuth: keys verified once and then served from memory, dropped when the
store's key generation moves or the cache goes stale, and never cached from a read that raced a
revoke. The store is a stand-in (this tests the cache, not Redis: test_api_keys.py does both)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from bluedove.core.apikeys import KeyRecord, new_key
from bluedove.core.errors import ApiError
from bluedove.dispatcher import auth as A


class Keys:
    """What KeyAuth asks the store: records by id and the generation; counts the reads."""

    def __init__(self) -> None:
        self.records: dict[str, KeyRecord] = {}
        self.gen = 0
        self.reads = 0
        self.during_read = None  # called while a read is under way (to race it)

    async def get(self, key_id):
        self.reads += 1
        rec = self.records.get(key_id)
        if self.during_read is not None:
            await self.during_read()
        return rec

    async def generation(self):
        return self.gen


class Store:
    class r:
        @staticmethod
        def register_script(_):
            return None


def make(*scopes):
    keys = Keys()
    a = A.KeyAuth(Store())
    a.keys = keys
    key, kid, dig = new_key()
    keys.records[kid] = KeyRecord(kid, dig, scopes)
    return a, keys, key, kid


def run(coro):
    return asyncio.run(coro)


def test_a_verified_key_costs_no_store_read_until_the_generation_moves():
    a, keys, key, kid = make("publish")

    async def go():
        await a.refresh()
        for _ in range(5):
            assert (await a.require(f"Bearer {key}", "publish")).id == kid
        assert keys.reads == 1
        keys.records[kid] = replace(keys.records[kid], revoked=time.time())
        keys.gen += 1
        assert (await a.require(f"Bearer {key}", "publish")).id == kid  # not yet seen: the refresh is due
        await a.refresh()
        with pytest.raises(ApiError) as exc:
            await a.require(f"Bearer {key}", "publish")
        assert exc.value.status == 401

    run(go())


def test_a_stale_cache_is_not_trusted():
    a, keys, key, _ = make("publish")

    async def go():
        await a.refresh()
        await a.require(f"Bearer {key}", "publish")
        a.fresh_at -= A.STALE_S + 0.1  # the generation has not been read for over a second
        await a.require(f"Bearer {key}", "publish")
        await a.require(f"Bearer {key}", "publish")
        assert keys.reads == 3

    run(go())


def test_a_read_that_raced_a_revoke_is_not_cached():
    a, keys, key, kid = make("publish")

    async def go():
        await a.refresh()

        async def revoke_meanwhile():
            keys.during_read = None
            keys.records[kid] = replace(keys.records[kid], revoked=time.time())
            keys.gen += 1
            await a.refresh()

        keys.during_read = revoke_meanwhile
        await a.require(f"Bearer {key}", "publish")  # read before the revoke landed: answered once
        with pytest.raises(ApiError):
            await a.require(f"Bearer {key}", "publish")  # but not remembered

    run(go())


def test_wrong_secrets_unknown_ids_and_other_schemes_are_401_and_a_missing_scope_403():
    a, keys, key, kid = make("subscribe")

    async def go():
        await a.refresh()
        for bad in (None, "", f"Basic {key}", "Bearer bdq_token", f"Bearer {key[:-1]}x",
                    f"Bearer bdk_{'0' * 16}_{'a' * 43}"):
            with pytest.raises(ApiError) as exc:
                await a.require(bad, "publish")
            assert (exc.value.status, exc.value.code) == (401, "unauthorized"), bad
        with pytest.raises(ApiError) as exc:
            await a.require(f"Bearer {key}", "publish")
        err = exc.value
        assert (err.status, err.code) == (403, "forbidden") and err.message.startswith("insufficient_scope:")
        assert err.headers == {"WWW-Authenticate": 'Bearer error="insufficient_scope", scope="publish"'}

    run(go())


def test_a_rate_limited_publish_is_429_with_retry_after_and_takes_nothing():
    a, keys, key, kid = make("publish")
    rec = replace(keys.records[kid], rate_msgs=10)
    a.admit(rec, 10, 0)
    with pytest.raises(ApiError) as exc:
        a.admit(rec, 5, 0)
    assert (exc.value.status, exc.value.code) == (429, "rate_limited")
    assert exc.value.headers == {"Retry-After": "1"}
    assert a.limits[kid].msgs.tokens > -1  # about 0, not -5: the refusal took nothing


def test_managing_other_keys_refills_no_bucket():
    """A key's creation or revocation moves the generation: the verified keys are dropped, but a
    key that spent its burst stays limited (a refill would give every key a fresh burst)."""
    a, keys, key, kid = make("publish")
    rec = replace(keys.records[kid], rate_msgs=10)

    async def go():
        await a.refresh()
        a.admit(rec, 10, 0)  # the burst, spent
        keys.gen += 1  # another key created or revoked
        await a.refresh()
        assert not a.verified and not a.cache
        with pytest.raises(ApiError) as exc:
            a.admit(rec, 5, 0)
        assert exc.value.status == 429

    run(go())
