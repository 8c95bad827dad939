"""bluedove/store/keys.py and client.py: the keys of one atomic step share a slot; catalogue
positions, shard by shard; store URLs, one server or a cluster."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from bluedove.store import keys as K
from bluedove.store.client import StoreUrlError, is_cluster_url, parse_cluster_url, wait_settings

queue_ids = st.text(alphabet="abcdef0123456789", min_size=32, max_size=32)


@given(queue_ids, st.text(alphabet="abcxyz0123456789-_.:", min_size=1, max_size=40))
def test_a_queues_keys_and_its_deliveries_marks_share_one_slot(queue, message_id):
    slot = key_slot(K.queue_stream(queue).encode())
    assert key_slot(K.queue_hash(queue).encode()) == slot
    assert key_slot(K.delivery_mark(queue, message_id).encode()) == slot


@given(queue_ids, queue_ids, st.text(alphabet="0123456789-", min_size=3, max_size=30))
def test_each_step_of_a_dead_letter_move_keeps_to_one_slot(queue, dead_queue, entry_id):
    # step one: the queue's stream, hash and outbox; step two: the dead-letter queue's keys and the move's mark
    slot = key_slot(K.queue_stream(queue).encode())
    assert key_slot(K.dead_outbox(queue).encode()) == slot
    dead = key_slot(K.queue_stream(dead_queue).encode())
    assert (key_slot(K.dead_mark(dead_queue, queue, entry_id).encode()) == dead
            == key_slot(K.queue_hash(dead_queue).encode()))


@given(queue_ids)
def test_a_queues_catalogue_keys_share_its_shards_slot(queue):
    shard = K.shard_of(queue)
    slot = key_slot(K.catalog_hash(shard).encode())
    assert {key_slot(k.encode()) for k in (K.catalog_log(shard), K.queue_subs(queue), K.queue_gone(queue))} == {slot}


def test_the_shard_of_a_queue_is_the_same_in_every_process():
    # CRC-32, not Python's hash(), which is seeded per process: crc32(b"abc") is 0x352441C2
    assert K.shard_of("abc") == 0x352441C2 % 16 == 2


def test_the_catalogue_shards_are_spread_over_slots():
    assert len({key_slot(K.catalog_log(s).encode()) for s in range(K.CATALOG_SHARDS)}) == K.CATALOG_SHARDS


def test_positions_are_one_stream_id_per_shard():
    start = K.parse_pos("0-0")
    assert start == ["0-0"] * K.CATALOG_SHARDS and K.parse_pos("") == start
    a = K.pos_with("0-0", 3, "5-1")
    b = K.pos_with(K.pos_with("0-0", 3, "4-9"), 7, "2-0")
    assert K.pos_of(a, 3) == "5-1" and K.pos_of(a, 7) == "0-0"
    assert K.pos_min([a, b]) == K.pos_with("0-0", 3, "4-9")  # each shard's oldest
    assert K.pos_max([a, b]) == K.pos_with(K.pos_with("0-0", 3, "5-1"), 7, "2-0")
    assert K.pos_max(["0-0"]) == K.join_pos(start)
    # ids compare as numbers, not text
    assert K.pos_of(K.pos_max([K.pos_with("0-0", 0, "10-0"), K.pos_with("0-0", 0, "9-5")]), 0) == "10-0"


@pytest.mark.parametrize("bad", ["1-0,2-0", ",".join(["x"] * K.CATALOG_SHARDS), "1-0"])
def test_a_malformed_position_is_refused(bad):
    with pytest.raises(ValueError):
        K.parse_pos(bad)


def test_cluster_urls():
    c = parse_cluster_url("redis+cluster://127.0.0.1:7000,127.0.0.1:7001")
    assert c.nodes == [("127.0.0.1", 7000), ("127.0.0.1", 7001)] and not c.tls
    assert (c.username, c.password, c.wait_replicas, c.wait_ms) == (None, None, 0, 1000)
    c = parse_cluster_url("rediss+cluster://u:p%40ss@h1:1/0?wait=1&wait_ms=250")
    assert c.tls and (c.username, c.password, c.nodes, c.wait_replicas, c.wait_ms) == ("u", "p@ss", [("h1", 1)], 1, 250)
    assert c.password == "p@ss"
    assert is_cluster_url("redis+cluster://h:1") and not is_cluster_url("redis://h:1/0")
    assert wait_settings("redis+cluster://h:1?wait=2") == (2, 1000) and wait_settings("redis://h:1/0") == (0, 0)


def test_a_cluster_password_from_the_environment_when_the_url_has_none(monkeypatch):
    monkeypatch.setenv("BLUEDOVE_STORE_PASSWORD", "from-env")
    assert parse_cluster_url("redis+cluster://h:1").password == "from-env"
    assert parse_cluster_url("redis+cluster://:in-url@h:1").password == "in-url"


@pytest.mark.parametrize("url,says", [
    ("redis://h:1", "starts with redis"),
    ("redis+cluster://h", "is not host:port"),
    ("redis+cluster://h:1,", "is not host:port"),
    ("redis+cluster://h:99999", "is not host:port"),
    ("redis+cluster://h:1/2", "only database 0"),
    ("redis+cluster://h:1?wiat=1", "unknown option 'wiat'"),
    ("redis+cluster://h:1?wait=x", "whole numbers"),
    ("redis+cluster://h:1?wait=-1", "wait must be"),
    ("redis+cluster://h:1?wait_ms=0", "wait must be"),
])
def test_a_bad_cluster_url_says_what_is_wrong(url, says):
    with pytest.raises(StoreUrlError, match=says):
        parse_cluster_url(url)


@given(st.text(alphabet="0123456789abcdef", min_size=16, max_size=16))
def test_every_api_key_record_shares_one_slot_with_the_ids_and_the_generation(key_id):
    # a create and a revoke are one script over these keys: on a Redis Cluster, one slot
    assert {key_slot(k.encode()) for k in (K.api_key(key_id), K.API_KEY_IDS, K.API_KEY_GEN)} == \
        {key_slot(K.API_KEY_GEN.encode())}


space_names = st.from_regex(r"[a-z0-9-]{1,63}", fullmatch=True)


@given(space_names)
def test_a_spaces_own_keys_share_one_slot_and_its_catalogue_shards_spread(space):
    slot = key_slot(K.space_record(space).encode())
    assert {key_slot(k.encode()) for k in (K.space_table(space), K.space_seed(space), K.space_keys(space))} == {slot}
    # each catalogue shard's hash and log share a slot of their own, in the space's tag family
    for n in range(K.CATALOG_SHARDS):
        assert key_slot(K.space_catalog_hash(space, n).encode()) == key_slot(K.space_catalog_log(space, n).encode())
        assert K.space_catalog_hash(space, n).startswith(f"bd:{{s:{space}:c:{n}}}")
    assert set(K.space_fixed_keys(space)) >= {K.space_table(space), K.space_seed(space)}
    assert K.space_record(space) not in K.space_fixed_keys(space)  # deleting a space removes its record last


@given(space_names, space_names)
def test_two_spaces_keys_never_meet(a, b):
    if a != b:
        assert K.space_record(a) != K.space_record(b)
        ka = {K.space_record(a), K.space_keys(a), *K.space_fixed_keys(a)}
        kb = {K.space_record(b), K.space_keys(b), *K.space_fixed_keys(b)}
        assert not ka & kb
        assert K.space_record(a).split("}")[0] != K.space_record(b).split("}")[0]  # another tag


def test_a_spaces_catalogue_spreads_over_slots_and_spaces_are_not_one_slot():
    assert len({key_slot(K.space_catalog_log("orders", n).encode()) for n in range(K.CATALOG_SHARDS)}) > 12
    assert len({key_slot(K.space_record(f"space-{i}").encode()) for i in range(50)}) > 45
    assert K.space_record("orders") == "bd:{s:orders}" and K.SPACES == "bd:spaces"
    # no existing key is a space's: queues, the catalogue, the cluster's state keep their names
    assert K.queue_hash("orders") == "bd:{q:orders}" and K.TABLE == "bd:table"
