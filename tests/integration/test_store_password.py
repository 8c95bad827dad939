"""A store that refuses the password: waiting for it gives up at once, not after its timeout
(a matcher or dispatcher started with a wrong password exits saying so, instead of retrying)."""

from __future__ import annotations

import time

import pytest
import redis
from redis.exceptions import AuthenticationError

from bluedove.store.server import RedisServer
from bluedove.store.store import Store, wait_ready

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("password", [None, "wrong"])
async def test_a_refused_password_ends_the_wait_at_once(tmp_path, password):
    server = RedisServer(tmp_path / "redis").start()
    try:
        redis.Redis(port=server.port).config_set("requirepass", "s3cret")
        url = server.url.replace("redis://", f"redis://:{password}@") if password else server.url
        store = Store(url)
        started = time.monotonic()
        with pytest.raises(AuthenticationError):
            await wait_ready(store, timeout_s=30)
        assert time.monotonic() - started < 5  # not the 30 s a store that is down gets
        await store.close()
        good = Store(server.url.replace("redis://", "redis://:s3cret@"))
        await wait_ready(good, timeout_s=5)
        await good.close()
    finally:
        server.stop()
