"""bluedove/store/apikeys.py against a real store (one server, or with `--store-kind cluster` a
Redis Cluster): records without secrets, revocation, the generation dispatchers watch."""

from __future__ import annotations

import pytest

from bluedove.core.apikeys import split_key, verify
from bluedove.store.apikeys import KeyStore

pytestmark = pytest.mark.integration


async def test_a_key_is_stored_hashed_listed_and_revoked_once(store):
    ks = KeyStore(store.r)
    assert not await ks.any() and await ks.generation() == 0
    key, rec = await ks.create(("publish",), "sensors", rate_msgs=50, burst_bytes=9)
    key_id, secret = split_key(key)
    got = await ks.get(key_id)
    assert got == rec and got.scopes == ("publish",) and got.rate_msgs == 50 and got.burst_bytes == 9
    assert verify(got, secret) and not verify(got, secret[::-1])
    stored = await store.r.hgetall(f"bd:{{keys}}:k:{key_id}")
    assert secret not in str(stored) and key not in str(stored)  # only the digest
    gen = await ks.generation()
    assert gen == 1 and await ks.any()
    other, _ = await ks.create(("admin",))
    assert [r.id for r in await ks.all()] == [key_id, split_key(other)[0]]
    assert await ks.revoke(key_id) == 1
    assert await ks.generation() == gen + 2  # the create, then the revoke
    assert not verify(await ks.get(key_id), secret)
    assert await ks.revoke(key_id) == 2 and await ks.generation() == gen + 2  # again: nothing moves
    assert await ks.revoke("0123456789abcdef") == 0
    assert await ks.get("0123456789abcdef") is None
