"""bluedove/dispatcher/space_quotas.py: a space's rates refuse with a 429 naming the quota and
`Retry-After`, taking nothing; this dispatcher's share scales them; the subscriptions quota
reads the space's count at most once a second and counts what this dispatcher adds."""

from __future__ import annotations

import asyncio

import pytest

from bluedove.core.errors import ApiError
from bluedove.core.spaces import Quotas
from bluedove.dispatcher.space_quotas import SpaceQuotas


def quotas(count: list[int] | None = None, **q) -> SpaceQuotas:
    reads = count if count is not None else []

    async def counted() -> int:
        reads.append(0)
        return 3

    return SpaceQuotas("shop", Quotas(**q), counted)


def refused(fn, *args) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args)
    assert info.value.status == 429 and info.value.code == "quota_exceeded"
    return info.value


def test_over_the_message_rate_is_a_429_naming_it_with_retry_after_and_takes_nothing():
    sq = quotas(messages_per_s=10)
    sq.check(10, 0, 1.0)
    sq.take(10, 0)
    err = refused(sq.check, 5, 0, 1.0)
    assert err.field == "quotas.messages_per_s" and int(err.headers["Retry-After"]) >= 1
    assert "shop" in err.message and "10 messages/s" in err.message
    assert sq.rates.msgs.tokens <= 0.1  # the refusal took nothing more


def test_the_byte_rate_is_named_when_it_is_the_one_over():
    sq = quotas(messages_per_s=1000, bytes_per_s=100)
    sq.check(1, 100, 1.0)
    sq.take(1, 100)
    assert refused(sq.check, 1, 50, 1.0).field == "quotas.bytes_per_s"


def test_a_share_of_the_rate_on_each_of_several_dispatchers():
    sq = quotas(messages_per_s=100)
    sq.check(50, 0, 0.5)  # 2 dispatchers: 50 each
    sq.take(50, 0)
    refused(sq.check, 10, 0, 0.5)


def test_no_quota_checks_nothing():
    sq = quotas()
    sq.check(10**6, 10**9, 1.0)
    asyncio.run(sq.check_subscriptions(10**6))


def test_the_subscriptions_quota_counts_at_most_once_a_second_and_what_it_adds():
    reads: list[int] = []
    sq = quotas(reads, subscriptions=5)

    async def run() -> None:
        await sq.check_subscriptions(1)  # 3 stored: 4
        await sq.check_subscriptions(1)  # 5
        with pytest.raises(ApiError) as info:
            await sq.check_subscriptions(1)
        assert info.value.field == "quotas.subscriptions" and info.value.headers is None

    asyncio.run(run())
    assert len(reads) == 1
