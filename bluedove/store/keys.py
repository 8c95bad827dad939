"""Where everything lives in the store: key names, their hash tags, the catalogue's shards and
the positions in its logs.

Every key is named for Redis Cluster: the keys one atomic step touches share a hash tag (the
part in braces), so they hash to one slot. On a single server the tags change nothing.

A queue `Q` (tag `{q:Q}`):
  bd:{q:Q}              hash    token (sha256 hex), created
  bd:{q:Q}:s            stream  its deliveries; consumer group `g`
  bd:{q:Q}:dd:<message> string  dedup mark: message <message> was written to Q (expires)
  bd:{q:Q}:dlo          stream  dead-letter outbox: deliveries leaving Q for its dead-letter queue
  bd:{q:Q}:dl:<P>:<id>  string  move mark: delivery <id> of queue P was dead-lettered into Q (expires)
  (the hash also holds the queue's bounds: max_undelivered, retention_s, dl_queue, dl_max,
  retain_acked_s, and its counters dropped, expired, dead_lettered; a queue that keeps acked
  deliveries also `kept`, how many of its stream's entries are acked, and `trim_at`, where the
  trim of old acked entries goes on: bluedove/store/kept_scripts.py)
  bd:tok:<sha256>       string  the queue a token belongs to
  bd:queues             set     every queue id (queue depth sampling walks it)
  bd:wake               channel every delivery write names the queue streams it wrote to,
                                space-separated (parked polls wait for it: bluedove/store/wakeups.py)

The catalogue, in CATALOG_SHARDS shards; a queue's subscriptions all live in the shard
`shard_of(Q)` (tag `{c:N}`), so that adding one against the queue's limit is one step:
  bd:{c:N}:subs         hash    subscription id -> catalogue JSON (system of record)
  bd:{c:N}:log          stream  the shard's changes (op add|replace|remove, id, sub) for matchers to tail
  bd:{c:N}:qs:Q         set     subscription ids of queue Q
  bd:{c:N}:gone:Q       string  Q was deleted: no subscription may be added to it (expires)

Published messages, the cluster's state (one key each, so one slot each):
  bd:dd:<message>       string  a publisher-chosen id was published (expires after the window)
  bd:table              string  the segment table JSON (compare-and-set by epoch)
  bd:seed               string  the partition seed the table was laid out by
  bd:{ev}:log, bd:{ev}:count    list and hash of cluster events
  bd:autoscaler, bd:disps       the autoscaler's settings; dispatchers' heartbeats

API keys (bluedove/store/apikeys.py), all in one slot `{keys}`:
  bd:{keys}:k:<id>      hash    digest of the secret, scopes, name, rates, created, revoked
  bd:{keys}:ids         set     every key id
  bd:{keys}:gen         counter bumped by every create and revoke (dispatchers watch it)

Named spaces (bluedove/store/spaces.py), a space `S` in the tag family `{s:S}`: its own keys in
the slot `{s:S}`, its catalogue's shards each in a slot of its own `{s:S:c:N}`, so that the
spaces' catalogues and tables spread over a cluster:
  bd:spaces             set     every space's name (the registry: listing reads it, never the keyspace)
  bd:spaces:gen         counter bumped after every create and delete (dispatchers watch it)
  bd:{s:S}              hash    spec (canonical JSON), created (ms), state (active|deleting)
  bd:{s:S}:table        string  the space's segment table JSON (compare-and-set by epoch)
  bd:{s:S}:seed         string  the partition seed its table was laid out by
  bd:{s:S}:keys         set     names of the space's keys outside the slot {s:S} that no other
                                name gives (added before the key is written), for deletion to find
  bd:{s:S:c:N}:subs, bd:{s:S:c:N}:log   hash and stream of its catalogue's shard N
  bd:{s:S:c:N}:qs:Q, bd:{s:S:c:N}:gone:Q  queue Q's subscription ids in the space, and its
                                deletion mark there (N = shard_of(Q), as in the default space)
  bd:{q:Q}:spaces       set     the named spaces queue Q has entered (a subscription there,
                                or one under way): deleting the queue walks them

A space's message log (bluedove/store/message_log.py), for a space with a retention (S is
`default` for the default space's), in LOG_SHARDS shards, each a slot of its own so the log
spreads over a cluster; a matcher appends to one shard (`log_shard` of its id), a chunk (one
matched batch) an entry:
  bd:{s:S:m:N}:log      stream  chunks: n, k, points, ids and bodies with their ends
  bd:{s:S}:rp:<sub>     hash    a replay's state: queue, from, end and position (a stream id
                                per shard), done, delivered, lease (its name is in the space's keys set)
  bd:{s:S}:replays      set     the subscriptions whose replay is not done
  bd:{q:Q}:rs:<sub>:<m> string  replay mark: message m was delivered to subscription sub of
                                queue Q, by the replay or live (expires)

A catalogue log position is one stream id per shard, joined by ","; "0-0" (or "") stands
for the start of every shard.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from bluedove.core.spaces import DEFAULT_SPACE

CATALOG_SHARDS = 16
GONE_TTL_S = 86_400  # queue ids are random and never reused: a day covers any racing add

TABLE = "bd:table"
SEED = "bd:seed"
EVENTS = "bd:{ev}:log"
EVENT_COUNTS = "bd:{ev}:count"
AUTOSCALER = "bd:autoscaler"
DISPATCHERS = "bd:disps"
QUEUES = "bd:queues"
WAKE = "bd:wake"


# -- queues ----------------------------------------------------------------------------------
def queue_hash(queue: str) -> str:
    return f"bd:{{q:{queue}}}"


def queue_stream(queue: str) -> str:
    return f"bd:{{q:{queue}}}:s"


def delivery_mark(queue: str, message_id: str) -> str:
    return f"bd:{{q:{queue}}}:dd:{message_id}"


def dead_outbox(queue: str) -> str:
    return f"bd:{{q:{queue}}}:dlo"


def dead_mark(dead_queue: str, queue: str, entry_id: str) -> str:
    return f"bd:{{q:{dead_queue}}}:dl:{queue}:{entry_id}"


def token_key(digest: str) -> str:
    return f"bd:tok:{digest}"


def message_mark(message_id: str) -> str:
    return f"bd:dd:{message_id}"


# -- API keys --------------------------------------------------------------------------------
API_KEY_IDS = "bd:{keys}:ids"
API_KEY_GEN = "bd:{keys}:gen"


def api_key(key_id: str) -> str:
    return f"bd:{{keys}}:k:{key_id}"


# -- named spaces ----------------------------------------------------------------------------
SPACES = "bd:spaces"
SPACES_GENERATION = "bd:spaces:gen"


def space_record(space: str) -> str:
    return f"bd:{{s:{space}}}"


def space_table(space: str) -> str:
    return f"bd:{{s:{space}}}:table"


def space_seed(space: str) -> str:
    return f"bd:{{s:{space}}}:seed"


def space_keys(space: str) -> str:
    return f"bd:{{s:{space}}}:keys"


def space_catalog_hash(space: str, shard: int) -> str:
    return CatalogueKeys(space).subs(shard)


def space_catalog_log(space: str, shard: int) -> str:
    return CatalogueKeys(space).log(shard)


def queue_spaces(queue: str) -> str:
    return f"bd:{{q:{queue}}}:spaces"


def space_fixed_keys(space: str) -> list[str]:
    """Every key of space `space` that its name gives, but the record and `space_keys`'s set:
    what deleting the space removes after the keys that set lists."""
    shards = [k for n in range(CATALOG_SHARDS) for k in (space_catalog_hash(space, n), space_catalog_log(space, n))]
    logs = [message_log(space, n) for n in range(LOG_SHARDS)]
    return [space_table(space), space_seed(space), space_replays(space), *shards, *logs]


LOG_SHARDS = 16


def message_log(space: str, shard: int) -> str:
    return f"bd:{{s:{space}:m:{shard}}}:log"


def log_shard(member: str) -> int:
    """The log shard a matcher appends to (CRC-32 of its id: the same in every process)."""
    return zlib.crc32(member.encode()) % LOG_SHARDS


def space_replay(space: str, sub_id: str) -> str:
    return f"bd:{{s:{space}}}:rp:{sub_id}"


def space_replays(space: str) -> str:
    return f"bd:{{s:{space}}}:replays"


def replay_mark(queue: str, sub_id: str, message_id: str) -> str:
    return f"bd:{{q:{queue}}}:rs:{sub_id}:{message_id}"


# -- the catalogue ---------------------------------------------------------------------------
def shard_of(queue: str) -> int:
    """The catalogue shard of a queue's subscriptions (CRC-32: the same in every process)."""
    return zlib.crc32(queue.encode()) % CATALOG_SHARDS


def catalog_hash(shard: int) -> str:
    return DEFAULT_CATALOGUE.subs(shard)


def catalog_log(shard: int) -> str:
    return DEFAULT_CATALOGUE.log(shard)


def queue_subs(queue: str) -> str:
    return DEFAULT_CATALOGUE.queue_subs(queue)


def queue_gone(queue: str) -> str:
    return DEFAULT_CATALOGUE.queue_gone(queue)


@dataclass(frozen=True)
class CatalogueKeys:
    """The keys of one space's catalogue: the default space's are the cluster's own (`{c:N}`),
    a named space's are in its tag family (`{s:S:c:N}`). A queue's keys in a catalogue share
    its shard's slot with the shard's hash and log, so that one subscribe is one script."""

    space: str = DEFAULT_SPACE

    def _tag(self, shard: int) -> str:
        return f"c:{shard}" if self.space == DEFAULT_SPACE else f"s:{self.space}:c:{shard}"

    def subs(self, shard: int) -> str:
        return f"bd:{{{self._tag(shard)}}}:subs"

    def log(self, shard: int) -> str:
        return f"bd:{{{self._tag(shard)}}}:log"

    def queue_subs(self, queue: str) -> str:
        return f"bd:{{{self._tag(shard_of(queue))}}}:qs:{queue}"

    def queue_gone(self, queue: str) -> str:
        return f"bd:{{{self._tag(shard_of(queue))}}}:gone:{queue}"


DEFAULT_CATALOGUE = CatalogueKeys()


# -- catalogue log positions -----------------------------------------------------------------
def _order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def read_past(pos: str, queue: str, entry_id: str) -> bool:
    """Whether a reader at `pos` has read entry `entry_id` of the log of `queue`'s shard."""
    return _order(parse_pos(pos)[shard_of(queue)]) >= _order(entry_id)


def newer(entry_id: str, than: str) -> bool:
    """Whether log entry `entry_id` comes after `than` (two entries of one shard's log)."""
    return _order(entry_id) > _order(than)


def parse_pos(pos: str) -> list[str]:
    """A position as one stream id per shard ("0-0" and "" are the start of every shard)."""
    if pos in ("", "0-0"):
        return ["0-0"] * CATALOG_SHARDS
    ids = pos.split(",")
    if len(ids) != CATALOG_SHARDS:
        raise ValueError(f"a catalogue position has {CATALOG_SHARDS} stream ids, not {len(ids)}: {pos!r}")
    for i in ids:
        _order(i)  # a ValueError if it is not "ms-seq"
    return ids


def join_pos(ids: list[str]) -> str:
    return ",".join(ids)


def pos_min(positions: list[str]) -> str:
    """Shard by shard, the oldest of `positions`: replaying from it misses none of their changes."""
    parsed = [parse_pos(p) for p in positions]
    return join_pos([min(col, key=_order) for col in zip(*parsed)])


def pos_max(positions: list[str]) -> str:
    """Shard by shard, the newest of `positions`."""
    parsed = [parse_pos(p) for p in positions]
    return join_pos([max(col, key=_order) for col in zip(*parsed)])


def pos_with(pos: str, shard: int, entry_id: str) -> str:
    """`pos` with shard `shard` moved to `entry_id`."""
    ids = parse_pos(pos)
    ids[shard] = entry_id
    return join_pos(ids)


def pos_of(pos: str, shard: int) -> str:
    return parse_pos(pos)[shard]
