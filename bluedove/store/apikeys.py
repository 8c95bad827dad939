"""API key records in the store (bluedove/core/apikeys.py says what a key is).

Every key record lives in the hash tag `{keys}` (bluedove/store/keys.py), one slot on a Redis
Cluster, so a change is one atomic script. The generation counter is bumped by every create
and revoke: dispatchers re-read it every 0.25 s and drop the keys they cached when it moves.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from bluedove.core.apikeys import KeyRecord, new_key
from bluedove.store.client import RedisClient
from bluedove.store.keys import API_KEY_GEN as GEN
from bluedove.store.keys import API_KEY_IDS as IDS
from bluedove.store.keys import api_key as key_hash

# KEYS: the key's hash, IDS, GEN. ARGV: id, then field/value pairs.
_CREATE = """
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('SADD', KEYS[2], ARGV[1])
return redis.call('INCR', KEYS[3])
"""
# KEYS: the key's hash, GEN. ARGV: now. 1 = revoked now, 2 = already revoked, 0 = no such key.
_REVOKE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'revoked') or '0') > 0 then return 2 end
redis.call('HSET', KEYS[1], 'revoked', ARGV[1])
redis.call('INCR', KEYS[2])
return 1
"""


def _record(key_id: str, raw: Mapping[str | bytes, str | bytes]) -> KeyRecord | None:
    if not raw:
        return None
    h = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
         for k, v in raw.items()}
    scopes = tuple(s for s in h.get("scopes", "").split(",") if s)
    return KeyRecord(id=key_id, digest=h.get("digest", ""), scopes=scopes,
                     name=h.get("name", ""), rate_msgs=float(h.get("rate_msgs", 0)),
                     rate_bytes=float(h.get("rate_bytes", 0)), burst_msgs=float(h.get("burst_msgs", 0)),
                     burst_bytes=float(h.get("burst_bytes", 0)), created=float(h.get("created", 0)),
                     revoked=float(h.get("revoked", 0)), spaces=tuple(n for n in h.get("spaces", "").split(",") if n))


class KeyStore:
    """The keys on a redis-py asyncio client (one server or a cluster: every key in one slot)."""

    def __init__(self, r: RedisClient) -> None:
        self.r = r
        self._create = r.register_script(_CREATE)
        self._revoke = r.register_script(_REVOKE)

    async def create(self, scopes: tuple[str, ...], name: str = "", rate_msgs: float = 0, rate_bytes: float = 0,
                     burst_msgs: float = 0, burst_bytes: float = 0,
                     spaces: tuple[str, ...] = ()) -> tuple[str, KeyRecord]:
        """A new key: (the key, shown once; its record). `spaces`: the only spaces it may use (() = all)."""
        key, key_id, dig = new_key()
        rec = KeyRecord(key_id, dig, scopes, name, rate_msgs, rate_bytes, burst_msgs, burst_bytes, time.time(),
                        spaces=spaces)
        fields = {"digest": dig, "scopes": ",".join(scopes), "name": name, "rate_msgs": rate_msgs,
                  "rate_bytes": rate_bytes, "burst_msgs": burst_msgs, "burst_bytes": burst_bytes,
                  "created": rec.created, "revoked": 0, "spaces": ",".join(spaces)}
        await self._create(keys=[key_hash(key_id), IDS, GEN], args=[key_id, *(x for kv in fields.items() for x in kv)])
        return key, rec

    async def get(self, key_id: str) -> KeyRecord | None:
        return _record(key_id, await self.r.hgetall(key_hash(key_id)))

    async def all(self) -> list[KeyRecord]:
        """Every key, oldest first."""
        ids = sorted(i.decode() if isinstance(i, bytes) else i for i in await self.r.smembers(IDS))
        recs = [await self.get(i) for i in ids]
        return sorted((r for r in recs if r is not None), key=lambda r: (r.created, r.id))

    async def any(self) -> bool:
        return bool(await self.r.scard(IDS))

    async def revoke(self, key_id: str) -> int:
        """1 revoked now, 2 already revoked, 0 no such key."""
        return int(await self._revoke(keys=[key_hash(key_id), GEN], args=[time.time()]))

    async def generation(self) -> int:
        return int(await self.r.get(GEN) or 0)
