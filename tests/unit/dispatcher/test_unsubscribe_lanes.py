"""Unsubscribes under way share their store round trips and matcher calls
(bluedove/dispatcher/subscriber.py), as subscribes do: a storm of them costs each matcher a
few RemoveSubscriptions calls, not one each, and each still answers only once they are done."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from bluedove.dispatcher.subscriber import SEND_INFLIGHT, WRITE_INFLIGHT, Subscriber


class _Store:
    def __init__(self, known: set[str]) -> None:
        self.known, self.calls = known, []

    async def add_subscriptions_each(self, subs):  # (the Subscriber's writer; not used here)
        raise AssertionError

    async def remove_subscriptions_each(self, subs):
        self.calls.append(len(subs))
        await asyncio.sleep(0.01)
        return [f"1-{i}" if sub_id in self.known else None for i, (sub_id, _q) in enumerate(subs)]


class _Matcher:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def RemoveSubscriptions(self, req, timeout):
        self.calls.append(list(req.ids))
        await asyncio.sleep(0.01)


def _subscriber(known: set[str]) -> tuple[Subscriber, _Store, dict[str, _Matcher]]:
    matchers = {"m1": _Matcher(), "m2": _Matcher()}
    cluster = SimpleNamespace(table=SimpleNamespace(members=dict.fromkeys(matchers)), stub=matchers.__getitem__)
    store = _Store(known)
    return Subscriber(SimpleNamespace(subscribe_timeout_s=5.0), cluster, store), store, matchers


async def test_a_storm_of_unsubscribes_costs_a_few_calls_not_one_each():
    ids = [f"s{i}" for i in range(200)]
    sub, store, matchers = _subscriber(set(ids))

    async def unsubscribe(sub_id: str) -> bool:
        found = await sub.remove(sub_id, "q")
        await sub.send_removal(sub_id)
        return found

    assert all(await asyncio.gather(*(unsubscribe(i) for i in ids)))
    assert sum(store.calls) == 200 and len(store.calls) <= WRITE_INFLIGHT + 1
    for m in matchers.values():
        assert sorted(i for call in m.calls for i in call) == sorted(ids)  # every matcher dropped each one
        assert len(m.calls) <= SEND_INFLIGHT + 1


async def test_an_unknown_subscription_is_said_so_and_reaches_no_matcher():
    sub, store, matchers = _subscriber({"a"})
    assert await sub.remove("a", "q") is True
    assert await sub.remove("nope", "q") is False
    assert all(m.calls == [] for m in matchers.values())


async def test_a_matcher_that_does_not_answer_holds_an_unsubscribe_no_longer_than_the_timeout():
    sub, _store, matchers = _subscriber({"a"})

    async def silent(req, timeout):
        await asyncio.sleep(60)

    matchers["m2"].RemoveSubscriptions = silent
    sub.s.subscribe_timeout_s = 0.2
    await asyncio.wait_for(sub.send_removal("a"), 2.0)  # answered; the catalogue log tells m2 later
    assert matchers["m1"].calls == [["a"]]
