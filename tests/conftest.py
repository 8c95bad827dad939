"""Fixtures shared by every test package.

One section per thing a fixture provides (so far: the store, a real private redis-server).
Add new fixtures to the section they belong to, or start a new one; give each a one-line
docstring saying what it gives and how long it lives.

The store fixtures never talk to a fake Redis: a session starts one real `redis-server`
(the one `bluedove up` would use) on a free loopback port the first time a test asks for
it, and stops it at the end of the session. Tests that need an empty store ask for
`redis_clean_url`, which flushes it first.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from bluedove.store.server import RedisServer

# -- store -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real redis-server private to this test session (started on first use)."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_clean_url(redis_url: str) -> str:
    """`redis_url`, emptied (FLUSHALL) before the test so tests never see each other's keys."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_url
