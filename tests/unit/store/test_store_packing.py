"""Store's hiredis command packer writes exactly the bytes redis-py's own packer writes."""

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from bluedove.store.wire import PackedConnection

CASES = [
    ("EVALSHA", "ab" * 20, 0, 2, "m1", b'{"id":"m1"}', 120, "q", 1, '["s1"]'),
    ("SET", "k", "v", "NX", "EX", 600),
    ("SCRIPT LOAD", "return 1"),
    (b"CONFIG GET", b"maxmemory"),
    ("HSET", "bd:q:x", "created", 1763800000.123456, "token", "é"),
    ("XADD", "s", "*", "m", b"\x00\xff", "n", -7, "f", 0.1),
]


@pytest.mark.parametrize("args", CASES)
def test_same_bytes_as_redis_py(args):
    assert b"".join(PackedConnection().pack_command(*args)) == b"".join(Connection().pack_command(*args))


@pytest.mark.parametrize("bad", [True, None, object()])
def test_other_types_take_redis_pys_path_and_its_errors(bad):
    with pytest.raises(DataError):
        PackedConnection().pack_command("SET", "k", bad)
