"""The gossip node as pure state: merge order, refutation, push-pull, probes, suspicion."""

import random

import pytest

from bluedove.gossip.config import GossipConfig
from bluedove.gossip.messages import (
    ALIVE,
    DEAD,
    DISPATCHER,
    LEFT,
    MATCHER,
    SUSPECT,
    Ack,
    Envelope,
    MemberState,
    Ping,
    PingReq,
    Push,
    PushReply,
    TableUpdate,
)
from bluedove.gossip.state import Node, fanout, suspicion_timeout


def node(i: int, **cfg) -> Node:
    return Node(f"m{i}", f"a{i}", generation=10, config=GossipConfig(**cfg), rng=random.Random(i))


def env(sender: Node, body) -> Envelope:
    return Envelope(sender.id, sender.addr, body)


def m(gen=10, inc=0, status=ALIVE, hb=0) -> MemberState:
    return MemberState("x", "ax", gen, inc, hb, status)


@pytest.mark.parametrize("older,newer", [
    (m(hb=5), m(hb=6)),                          # a newer heartbeat
    (m(hb=9), m(status=SUSPECT, hb=3)),          # suspicion beats heartbeats at one incarnation
    (m(status=SUSPECT), m(status=DEAD)),         # death beats suspicion
    (m(status=DEAD, hb=9), m(inc=1, hb=0)),      # a refutation (higher incarnation) beats death
    (m(status=DEAD, inc=7), m(gen=11)),          # a restart (new generation) beats everything
    (m(status=ALIVE), m(status=LEFT)),           # a graceful leave is final for that incarnation
])
def test_merge_order(older, newer):
    n = node(0)
    n.receive(env(node(9), Push((older,), 0)), now=1.0)
    n.receive(env(node(9), Push((newer,), 0)), now=2.0)
    assert n.members["x"] == newer
    n.receive(env(node(9), Push((older,), 0)), now=3.0)
    assert n.members["x"] == newer  # an older entry never wins back


@pytest.mark.parametrize("n_live,expected", [(1, 1), (2, 2), (4, 3), (10, 5), (50, 7), (200, 9)])
def test_fanout_is_ceil_log2_n_plus_one(n_live, expected):
    assert fanout(n_live, 1) == expected


def test_suspicion_timeout_grows_with_log_n_beyond_8():
    assert suspicion_timeout(1.0, 4) == 1.0
    assert suspicion_timeout(1.0, 8) == 1.0
    assert suspicion_timeout(1.0, 64) == pytest.approx(2.0)


def test_a_suspected_member_refutes_with_a_higher_incarnation():
    a, b = node(0), node(1)
    suspicion = MemberState("m1", "a1", 10, 0, 3, SUSPECT)
    b.receive(env(a, Push((suspicion,), 0)), now=1.0)
    assert b.me.incarnation == 1 and b.me.status == ALIVE
    assert b.me.key > suspicion.key
    b.receive(env(a, Push((MemberState("m1", "a1", 10, 1, 3, DEAD),), 0)), now=2.0)
    assert b.me.incarnation == 2 and b.me.status == ALIVE  # even a death notice is refuted


def test_push_reply_carries_only_what_the_pusher_lacks_and_the_newer_table():
    a, b = node(0), node(1)
    b.offer_table(3, '{"epoch": 3}')
    a.tick(0.0)
    b.tick(0.0)
    b.receive(env(node(2), Push((MemberState("m2", "a2", 10, 0, 4),), 0)), now=0.1)
    [out] = b.receive(env(a, Push(tuple(a.members.values()), a.epoch)), now=0.2)
    reply = out.envelope.body
    assert out.addr == "a0" and isinstance(reply, PushReply)
    assert {e.id for e in reply.members} == {"m1", "m2"}  # not m0: a's own entry is a's newest
    assert reply.table_json == '{"epoch": 3}'
    a.receive(out.envelope, now=0.3)
    assert a.epoch == 3 and set(a.members) == {"m0", "m1", "m2"}


def _pushes(outs) -> list[str]:
    return [o.addr for o in outs if isinstance(o.envelope.body, Push)]


def _quiet(n: int) -> Node:
    """Node m0 hearing n - 1 others' heartbeats every round, its news (their joining) 2 s old."""
    a = node(0)
    for r in range(10):
        a.receive(env(node(1), Push(tuple(MemberState(f"m{i}", f"a{i}", 10, 0, r + 1) for i in range(1, n)), 0)),
                  now=0.2 * r)
        a.tick(0.2 * r + 0.1)
    return a


def test_a_push_bringing_the_pusher_only_newer_heartbeats_is_not_answered():
    """Every push carries every heartbeat, so a newer heartbeat alone is no reason to answer;
    answering every push doubled the envelopes of a quiet round."""
    a, b = node(0), node(1)
    b.receive(env(a, Push(tuple(a.members.values()), 0)), now=0.0)
    a.receive(env(b, Push(tuple(b.members.values()), 0)), now=0.0)
    for t in (0.2, 0.4, 0.6):
        a.tick(t), b.tick(t)
    stale = tuple(replace_hb(e, 1) for e in a.members.values())  # a's view, heartbeats behind b's
    assert b.receive(env(a, Push(stale, 0)), now=0.7) == []


def replace_hb(e: MemberState, hb: int) -> MemberState:
    return MemberState(e.id, e.addr, e.generation, e.incarnation, hb, e.status, role=e.role)


@pytest.mark.parametrize("what", ["a member it lacks", "a newer status", "our newer table", "its newer table"])
def test_a_push_missing_news_is_answered_with_it(what):
    a, b = node(0), node(1)
    b.receive(env(a, Push(tuple(a.members.values()), 0)), now=0.0)
    a.receive(env(b, Push(tuple(b.members.values()), 0)), now=0.0)
    for t in (0.2, 0.4, 0.6, 0.8):
        a.tick(t), b.tick(t)
    view, epoch = tuple(a.members.values()), 0
    if what == "a member it lacks":
        b.receive(env(node(2), Push((MemberState("m2", "a2", 10, 0, 1),), 0)), now=0.9)
    elif what == "a newer status":
        b.receive(env(node(2), Push((MemberState("m2", "a2", 10, 0, 1),), 0)), now=0.9)
        view += (MemberState("m2", "a2", 10, 0, 1),)
        b.receive(env(node(3), Push((MemberState("m2", "a2", 10, 0, 1, SUSPECT),), 0)), now=0.9)
    elif what == "our newer table":
        b.offer_table(4, "t4")
    else:
        a.offer_table(4, "t4")
        epoch = 4
    replies = [o for o in b.receive(env(a, Push(view, epoch)), now=1.0) if isinstance(o.envelope.body, PushReply)]
    assert [o.addr for o in replies] == ["a0"]
    body = replies[0].envelope.body
    if what == "our newer table":
        assert body.table_json == "t4"
    if what == "its newer table":
        [back] = a.receive(replies[0].envelope, now=1.1)  # a sends its table back
        assert body.epoch == 0 and back.envelope.body == TableUpdate(4, "t4")


def test_a_quiet_round_pushes_to_the_quiet_fanout_and_news_to_the_full_one_for_a_few_rounds():
    a = _quiet(20)
    full = fanout(20, 1)
    assert full == 6 and len(_pushes(a.tick(2.0))) == 3  # quiet: heartbeats and load alone moved
    # News (a member suspected) is pushed on at once to the full fanout, and by the rounds after
    # it for `news_rounds` rounds; then the rounds are quiet again.
    suspected = MemberState("m5", "a5", 10, 0, 1, SUSPECT)
    eager = _pushes(a.receive(env(node(7), Push((suspected,), 0)), now=2.1))
    assert len(eager) == full and len(set(eager)) == full
    counts = []
    for r in range(6):  # heartbeats go on arriving
        a.receive(env(node(1), Push(tuple(MemberState(f"m{i}", f"a{i}", 10, 0, 20 + r) for i in range(1, 20)), 0)),
                  now=2.15 + 0.2 * r)
        counts.append(len(_pushes(a.tick(2.2 + 0.2 * r))))
    assert counts == [full] * a.config.news_rounds + [3] * (6 - a.config.news_rounds)


def test_news_is_pushed_on_eagerly_at_most_once_a_round():
    a = _quiet(20)
    first = a.receive(env(node(7), Push((MemberState("m5", "a5", 10, 0, 1, SUSPECT),), 0)), now=2.1)
    second = a.receive(env(node(8), Push((MemberState("m6", "a6", 10, 0, 1, SUSPECT),), 0)), now=2.12)
    assert _pushes(first) and not _pushes(second)  # the round's pushes carry the second
    a.tick(2.2)
    third = a.receive(env(node(9), Push((MemberState("m7", "a7", 10, 0, 1, SUSPECT),), 0)), now=2.25)
    assert _pushes(third)
    # A newer heartbeat is no news: no eager push, and no answer to a pusher that lacks nothing.
    view = tuple(replace_hb(e, 99) if e.id == "m8" else e for e in a.members.values())
    assert a.receive(env(node(9), Push(view, 0)), now=2.3) == [] and a.members["m8"].heartbeat == 99


def test_a_peer_with_an_older_table_gets_ours():
    a, b = node(0), node(1)
    a.offer_table(5, "t5")
    [out] = a.receive(env(b, PushReply((), 4, "")), now=1.0)
    assert out.addr == "a1" and out.envelope.body == TableUpdate(5, "t5")
    b.receive(out.envelope, now=1.1)
    assert b.epoch == 5 and b.table_json == "t5"
    assert not b.offer_table(4, "t4")  # older: ignored


def test_ping_req_relays_and_forwards_the_ack_with_the_requesters_seq():
    requester, helper, target = node(0), node(1), node(2)
    [ping] = helper.receive(env(requester, PingReq(41, "m2", "a2")), now=0.0)
    assert ping.addr == "a2" and isinstance(ping.envelope.body, Ping)
    [ack] = target.receive(ping.envelope, now=0.01)
    assert ack.addr == "a1" and ack.envelope.body.target == "m2"
    [forwarded] = helper.receive(ack.envelope, now=0.02)
    assert forwarded.addr == "a0" and forwarded.envelope.body == Ack(41, "m2")


def _known(n: Node, other: Node, now: float) -> None:
    """n hears other's heartbeats every 0.2 s until `now`."""
    t, hb = 0.0, 0
    while t <= now:
        hb += 1
        n.receive(env(other, Push((MemberState(other.id, other.addr, 10, 0, hb),), 0)), now=t)
        t = round(t + 0.2, 6)


def _ticks(n: Node, start: float, end: float) -> list[tuple[float, object]]:
    """Rounds every 0.2 s from start to end (inclusive): [(time, out), ...]."""
    outs, t = [], start
    while t <= end + 1e-9:
        outs += [(t, o) for o in n.tick(t)]
        t = round(t + 0.2, 6)
    return outs


def test_silence_leads_to_a_probe_then_suspicion_then_death():
    a, x, h = node(0), node(1), node(2)
    _known(a, x, 2.0)
    _known(a, h, 6.0)  # the helper stays in touch
    outs = _ticks(a, 0.0, 3.0)
    probes = [(t, o) for t, o in outs if isinstance(o.envelope.body, (Ping, PingReq))]
    assert {(o.addr, type(o.envelope.body).__name__) for _, o in probes} == {("a1", "Ping"), ("a2", "PingReq")}
    probed_at = probes[0][0]
    assert 2.6 <= probed_at <= 3.0  # phi crosses 8 about 0.76 s after the last heartbeat
    changes = {}
    t = 3.2
    while t < 6.0:
        a.tick(t)
        changes.setdefault(a.status("m1"), t)
        t = round(t + 0.2, 6)
    assert changes["suspect"] - probed_at == pytest.approx(0.6, abs=0.01)  # probe timeout 0.5 s
    assert changes["dead"] - changes["suspect"] == pytest.approx(1.0, abs=0.01)  # suspicion timeout
    assert [e[2] for e in a.events if e[1] == "m1"] == ["alive", "suspect", "dead"]


def test_an_ack_through_another_member_prevents_suspicion():
    a, x, h = node(0), node(1), node(2)
    _known(a, x, 2.0)
    _known(a, h, 6.0)
    outs = _ticks(a, 0.0, 3.0)
    seq = next(o.envelope.body.seq for _, o in outs if isinstance(o.envelope.body, PingReq))
    a.receive(env(h, Ack(seq, "m1")), now=3.05)  # the direct ping was lost; the helper reached x
    _ticks(a, 3.2, 3.6)
    assert a.status("m1") == "alive"


def test_leave_is_announced_and_stops_heartbeats():
    a = node(0)
    a.tick(0.0)
    a.leave(0.1)
    hb = a.me.heartbeat
    a.tick(0.2)
    assert a.me.status == LEFT and a.me.heartbeat == hb


def test_an_expected_member_is_given_the_join_grace_then_probed():
    a, h = node(0, join_grace_s=5.0), node(2)
    a.expect({"m1": "a1"}, now=0.0)
    assert a.status("m1") == "alive" and a.members["m1"].generation == 0
    _known(a, h, 7.0)
    pings = [t for t, o in _ticks(a, 0.0, 7.0) if o.addr == "a1" and isinstance(o.envelope.body, Ping)]
    assert pings and 5.0 < pings[0] < 6.0
    # Once the member shows up, its real entry (any generation > 0) replaces the placeholder.
    a.receive(env(node(1), Push((MemberState("m1", "a1", 10, 0, 1),), 0)), now=6.1)
    assert a.members["m1"].generation == 10 and "m1" not in a.probes


def test_a_node_that_was_itself_stalled_does_not_suspect_everyone():
    a, x, h = node(0), node(1), node(2)
    _known(a, x, 2.0)
    _known(a, h, 2.0)
    a.tick(2.0)
    # Our own loop was blocked for 3 s: nobody's heartbeats were read meanwhile.
    outs = a.tick(5.0)
    assert not [o for o in outs if isinstance(o.envelope.body, (Ping, PingReq))]
    # Silence after we are running again counts as usual.
    pings = [t for t, o in _ticks(a, 5.2, 6.4) if isinstance(o.envelope.body, Ping)]
    assert pings and pings[0] >= 5.6


# -- roles: dispatchers are members that own nothing -------------------------------------------
def test_a_dispatcher_joins_by_seed_learns_the_table_and_its_death_shows():
    """A dispatcher node seeded with one matcher's address learns every matcher and the table
    within a few rounds; matchers see it with its role; once it crashes every matcher declares
    it dead (its death must show, like a matcher's). Fails if the role is lost in a merge or a
    dispatcher is left out of probing."""
    from bluedove.gossip.memory import SimNetwork

    net = SimNetwork(seed=3)
    matchers = net.spawn(3)
    matchers[0].offer_table(7, "t7")
    d = net.add(Node("d1", "d1:1", generation=1, seeds=("m0:1",), rng=random.Random(9), role=DISPATCHER))
    net.run_until(2.0)
    assert d.epoch == 7 and d.table_json == "t7"
    assert {m.id for m in d.peers()} == {"m0", "m1", "m2"}
    assert all(m.members["d1"].role == DISPATCHER and m.status("d1") == "alive" for m in matchers)
    assert all(e.role == MATCHER for e in d.members.values() if e.id != "d1")
    net.crash("d1:1")
    net.run_until(8.0)
    assert [m.status("d1") for m in matchers] == ["dead"] * 3
    assert all(m.status(o.id) == "alive" for m in matchers for o in matchers)


def test_a_node_of_an_unknown_role_is_refused():
    with pytest.raises(ValueError, match="role 'router'"):
        Node("x", "ax", 1, role="router")


def test_the_role_survives_the_wire_and_an_entry_without_one_is_a_matchers():
    from bluedove.gossip import wire
    from bluedove.v1 import gossip_pb2 as pb

    push = Push((MemberState("d1", "ad", 5, role=DISPATCHER), MemberState("m1", "am", 5)), 3)
    back = wire.decode(wire.encode(Envelope("d1", "ad", push)))
    assert [e.role for e in back.body.members] == [DISPATCHER, MATCHER]
    old = pb.Envelope(sender="m9", sender_addr="a9", push=pb.Push(members=[pb.MemberEntry(id="m9", addr="a9")]))
    assert wire.from_proto(old).body.members[0].role == MATCHER  # a member from before roles


def test_an_owner_expected_without_an_address_is_never_sent_to_but_is_still_declared_dead():
    """`bluedove init --matchers N` names owners with no address yet: gossip expects them by id,
    pushes to the seeds instead, and, if one never comes up, suspects it and declares it dead after
    the join grace like any other expected member (then it is taken over)."""
    n = Node("m1", "a1", generation=10, config=GossipConfig(join_grace_s=1.0, suspect_timeout_s=0.5),
             seeds=("seed:7001",), rng=random.Random(1))
    n.expect({"m2": ""}, now=0.0)
    t, outs = 0.0, []
    while t < 5.0 and n.members["m2"].status != DEAD:
        outs += n.tick(t)
        t += 0.2
    assert all(o.addr for o in outs), "something was sent to an empty address"
    assert any(o.addr == "seed:7001" for o in outs), "with no reachable peer the seeds are pushed to"
    assert n.members["m2"].status == DEAD, "an expected member that never answers must be declared dead"
