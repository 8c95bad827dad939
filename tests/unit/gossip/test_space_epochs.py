"""Named spaces' table epochs on the gossip (bluedove/gossip/space_epochs.py, and the node's
pushes): a rise is news for NEWS_S seconds, at most NEWS_MOST of them; hearing an epoch again
is not news; it survives the wire; a rise reaches every member within a few rounds."""

from __future__ import annotations

import random

from bluedove.gossip import wire
from bluedove.gossip.config import GossipConfig
from bluedove.gossip.messages import Envelope, MemberState, Push, PushReply
from bluedove.gossip.space_epochs import NEWS_MOST, NEWS_S, SpaceEpochs
from bluedove.gossip.state import Node


def test_a_rise_is_news_for_a_while_and_taken_once_by_the_owner():
    s = SpaceEpochs()
    assert s.offer("orders", 3, now=0.0) and not s.offer("orders", 3, now=1.0) and not s.offer("orders", 2, 1.0)
    assert s.news(1.0) == (("orders", 3),) and s.take_rises() == {"orders": 3} and s.take_rises() == {}
    s.merge([("orders", 4), ("fleet", 2)], now=5.0)
    assert s.take_rises() == {"orders": 4, "fleet": 2}
    assert s.news(5.0 + NEWS_S) == (("orders", 4), ("fleet", 2))
    assert s.news(5.1 + NEWS_S) == ()  # no longer news: pushes carry nothing
    s.merge([("orders", 4)], now=100.0)  # heard again from a peer that still pushes it: not news
    assert s.news(100.0) == () and s.take_rises() == {}


def test_a_burst_of_rises_pushes_the_newest_only():
    s = SpaceEpochs()
    for i in range(NEWS_MOST + 50):
        s.offer(f"s{i}", 2, now=float(i) / 1000)
    news = s.news(1.0)
    assert len(news) == NEWS_MOST and news[-1] == (f"s{NEWS_MOST + 49}", 2) and news[0] == ("s50", 2)


def test_pushes_and_replies_carry_the_news_over_the_wire_and_merge_it():
    a = Node("m1", "a1", 10, GossipConfig(), rng=random.Random(1))
    b = Node("m2", "a2", 10, GossipConfig(), rng=random.Random(2))
    a.spaces.offer("orders", 5, now=0.0)
    push = Push((MemberState("m1", "a1", 10),), 0, a.spaces.news(0.0))
    back = wire.decode(wire.encode(Envelope("m1", "a1", push)))
    assert back.body.spaces == (("orders", 5),)
    b.spaces.offer("fleet", 7, now=0.0)
    b.spaces.take_rises()  # its own: the owner made it
    # b answers, and pushes the news (a new member, a space's rise) on at once
    [reply] = [o for o in b.receive(back, now=0.1) if isinstance(o.envelope.body, PushReply)]
    assert b.spaces.take_rises() == {"orders": 5}  # the push's news merged
    body = wire.decode(wire.encode(reply.envelope)).body
    assert isinstance(body, PushReply) and body.spaces == (("fleet", 7),)  # and the reply carries ours
    a.receive(Envelope("m2", "a2", body), now=0.2)
    assert a.spaces.known == {"orders": 5, "fleet": 7}


def test_a_rise_reaches_every_member_of_twenty_within_a_few_rounds():
    nodes = [Node(f"m{i}", f"a{i}", 10, GossipConfig(), seeds=("a0",), rng=random.Random(i)) for i in range(20)]
    by_addr = {n.addr: n for n in nodes}

    def round_at(t: float) -> None:
        pending = [out for n in nodes for out in n.tick(t)]
        while pending:
            out = pending.pop()
            pending += by_addr[out.addr].receive(out.envelope, t)

    t = 0.0
    while any(len(n.members) < 20 for n in nodes):  # the members know each other first
        t += 0.2
        round_at(t)
        assert t < 20
    nodes[7].spaces.offer("orders", 9, now=t)
    rounds = 0
    while any(n.spaces.known.get("orders") != 9 for n in nodes):
        rounds += 1
        assert rounds <= 6, [n.spaces.known for n in nodes]
        round_at(t + 0.2 * rounds)
