"""The `orders` workload of docs/workloads.md: a shop's orders, typed attributes with skew.

Messages are orders: a status, a region, a SKU, an amount, sometimes a coupon, and whether
they ship express. A few statuses, regions and SKU categories carry most orders; amounts are
log-normal (most small, a long tail). Subscriptions are what teams of the shop would ask:
equals on region and status, `in` on statuses, a SKU category's prefix, amount bands and
thresholds, coupon orders, open orders (`not_in`), and big orders OR coupon orders (`any_of`).

Partition attributes (the dimensions mPartition cuts): region, status, amount.

- region: 85 % of subscriptions name one region, so on this dimension a subscription is one
  cell, on one matcher, instead of a wildcard stored on every one.
- status: more than half the subscriptions pin it to one to three of its seven values.
- amount: the skew of the strings needs a number. Equals on a string is a cell no cut can
  split, and the top region or status carries over a third of the orders: their owners are hot
  on those dimensions whatever the table. Amount always splits, so a hot region's orders
  keep a candidate that can be relieved. The price: only the amount bands and thresholds
  (a fifth of subscriptions) constrain it; the rest are wildcards in every amount set.
- not sku: only the subscriptions with a prefix (22 %) constrain it. Not coupon: optional and
  absent from 85 % of orders, all of which sit on its lowest coordinate, one point no cut
  splits. Not express: two values.

`get(partition=...)` cuts other attributes, to measure another choice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bluedove.core.attributes import BOOLEAN, NUMBER, STRING, Attribute
from bluedove.core.space import Space
from bluedove.lab.workloads.typed import TypedWorkload

# Statuses, in an order's life, and the share of orders in each: delivered and shipped carry 60 %.
STATUSES = ("placed", "paid", "packed", "shipped", "delivered", "returned", "cancelled")
STATUS_P = (0.08, 0.12, 0.10, 0.25, 0.35, 0.04, 0.06)
# Regions by rank, weights Zipf (1 / rank ** s). us-east-1 and us-east-2 share their first 6
# bytes (one coordinate, bluedove/core/attributes.py), as do ap-south-1 and ap-southeast-1.
REGIONS = ("us-east-1", "eu-west-1", "us-west-2", "ap-south-1", "eu-central-1", "ap-southeast-1",
           "us-east-2", "sa-east-1", "ap-northeast-1", "ca-central-1")
REGION_ZIPF = 1.1
# SKUs: "EL-0042", a category of two letters, a dash, four digits (uniform); categories Zipf.
CATEGORIES = ("EL", "HO", "AP", "BK", "TO", "SP", "BE", "GR", "PE", "GA", "AU", "OF")
CATEGORY_ZIPF = 1.0
# Amounts: log-normal, median 60, sigma 1.1 (of the log); floored to cents, below AMOUNT_MAX.
AMOUNT_MAX = 10_000.0
AMOUNT_MEDIAN = 60.0
AMOUNT_SIGMA = 1.1
# Coupons: on 15 % of orders, codes Zipf; express shipping on 20 %.
COUPON_SHARE = 0.15
COUPONS = ("WELCOME10", "FREESHIP", "SPRING15", "VIP20", "BUNDLE5")
COUPON_ZIPF = 1.0
EXPRESS_SHARE = 0.20
PARTITION = ("region", "status", "amount")

# Subscriptions: the kinds and their shares (docs/workloads.md has the table).
KINDS = ("region_status", "status_in", "sku_prefix", "amount_band", "big_orders", "coupon", "open_orders",
         "express", "big_or_coupon")
KIND_P = (0.25, 0.15, 0.15, 0.12, 0.08, 0.08, 0.07, 0.05, 0.05)
STATUS_SETS = (("paid", "packed"), ("shipped", "delivered"), ("returned", "cancelled"), ("placed", "paid", "packed"))
CLOSED = ("delivered", "returned", "cancelled")  # open orders: status not_in these
AMOUNT_BANDS = ((0, 25), (25, 50), (50, 100), (100, 250), (250, 500), (500, 1000), (1000, 10_000))
BIG = (500, 1000, 2500)  # thresholds of big orders (gte)
SKU_FINE = 0.25  # share of SKU prefixes naming a sub-category too ("EL-4", its first digit)
SKU_IN_REGION = 0.5  # share of SKU prefix subscriptions that name a region (the rest: status "paid", anywhere)
BIG_PLACED = 0.5  # share of big-order subscriptions that watch only new (placed) orders
# A subscription's boxes on the default partition: at most 3 (`in` of 3 statuses).
MAX_BOXES_PER_SUB = 3


def zipf(n: int, s: float) -> np.ndarray:
    """Weights of ranks 1..n proportional to 1 / rank ** s, summing to 1."""
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / float(w.sum())


REGION_P = zipf(len(REGIONS), REGION_ZIPF)
CATEGORY_P = zipf(len(CATEGORIES), CATEGORY_ZIPF)
COUPON_P = zipf(len(COUPONS), COUPON_ZIPF)
ATTRIBUTES = (
    Attribute("status", STRING),
    Attribute("region", STRING),
    Attribute("sku", STRING),
    Attribute("amount", NUMBER, False, 0.0, AMOUNT_MAX),
    Attribute("coupon", STRING, optional=True),
    Attribute("express", BOOLEAN),
)


def orders_space(partition: tuple[str, ...] = PARTITION) -> Space:
    """The orders' space: six attributes, `partition` cut (default region, status, amount)."""
    names = [a.name for a in ATTRIBUTES]
    if not partition:
        raise ValueError("partition: expected at least one attribute name")
    for p in partition:
        if p not in names:
            raise ValueError(f"partition: {p!r} is not an attribute; expected some of {names}")
    if len(set(partition)) != len(partition):
        raise ValueError(f"partition: an attribute is named twice in {list(partition)}")
    return Space.of(ATTRIBUTES, tuple(partition))


def _sample(n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """n orders' attributes, each valid in the space (plain Python values, JSON-ready)."""
    status = rng.choice(len(STATUSES), n, p=STATUS_P)
    region = rng.choice(len(REGIONS), n, p=REGION_P)
    category = rng.choice(len(CATEGORIES), n, p=CATEGORY_P)
    item = rng.integers(0, 10_000, n)
    amount = np.floor(rng.lognormal(np.log(AMOUNT_MEDIAN), AMOUNT_SIGMA, n) * 100.0) / 100.0
    amount = np.minimum(amount, AMOUNT_MAX - 0.01)
    has_coupon = rng.random(n) < COUPON_SHARE
    coupon = rng.choice(len(COUPONS), n, p=COUPON_P)
    express = rng.random(n) < EXPRESS_SHARE
    out = []
    for i in range(n):
        m: dict[str, Any] = {"status": STATUSES[status[i]], "region": REGIONS[region[i]],
                             "sku": f"{CATEGORIES[category[i]]}-{int(item[i]):04d}", "amount": float(amount[i]),
                             "express": bool(express[i])}
        if has_coupon[i]:
            m["coupon"] = COUPONS[coupon[i]]
        out.append(m)
    return out


def _one(rng: np.random.Generator, p: np.ndarray | tuple[float, ...]) -> int:
    return int(rng.choice(len(p), p=p))


def _predicates(kind: str, rng: np.random.Generator, region: str) -> dict[str, Any]:
    """One subscription of `kind`; `region` is its queue's home region."""
    if kind == "region_status":
        return {"region": region, "status": STATUSES[_one(rng, STATUS_P)]}
    if kind == "status_in":
        return {"region": region, "status": {"in": list(STATUS_SETS[rng.integers(len(STATUS_SETS))])}}
    if kind == "sku_prefix":
        category = CATEGORIES[_one(rng, CATEGORY_P)]
        prefix = f"{category}-{rng.integers(10)}" if rng.random() < SKU_FINE else f"{category}-"
        where = {"region": region} if rng.random() < SKU_IN_REGION else {"status": "paid"}
        return {"sku": {"prefix": prefix}, **where}
    if kind == "amount_band":
        return {"region": region, "amount": list(AMOUNT_BANDS[rng.integers(len(AMOUNT_BANDS))])}
    if kind == "big_orders":
        big: dict[str, Any] = {"amount": {"gte": BIG[rng.integers(len(BIG))]}}
        return {**big, "status": "placed"} if rng.random() < BIG_PLACED else big
    if kind == "coupon":
        return {"region": region, "coupon": {"exists": True}}
    if kind == "open_orders":
        return {"region": region, "sku": {"prefix": f"{CATEGORIES[_one(rng, CATEGORY_P)]}-"},
                "status": {"not_in": list(CLOSED)}}
    if kind == "express":
        return {"region": region, "express": True, "status": {"in": ["paid", "packed"]}}
    # big_or_coupon
    return {"region": region, "any_of": [{"amount": {"gte": BIG[rng.integers(len(BIG))]}},
                                         {"coupon": {"exists": True}}]}


def _subscriptions(rng: np.random.Generator, n_subs: int, n_queues: int) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Queues of n_subs // n_queues (or one more) subscriptions each, each queue with a home
    region drawn as orders' regions are; each subscription of a kind drawn by KIND_P."""
    queue_of = np.arange(n_subs, dtype=np.int64) * n_queues // n_subs
    home = rng.choice(len(REGIONS), n_queues, p=REGION_P)
    kind = rng.choice(len(KINDS), n_subs, p=KIND_P)
    preds = [_predicates(KINDS[kind[j]], rng, REGIONS[home[queue_of[j]]]) for j in range(n_subs)]
    return preds, queue_of


def get(seed: int = 1, n_subs: int = 10_000, n_queues: int = 1_000,
        partition: tuple[str, ...] = PARTITION) -> TypedWorkload:
    """The orders workload: `n_subs` subscriptions over `n_queues` queues (about n_subs / n_queues
    each); messages from `TypedWorkload.sample` (or `.messages(n, seed)`) are orders."""
    if n_queues < 1:
        raise ValueError(f"n_queues: expected >= 1, got {n_queues}")
    if n_subs < n_queues:
        raise ValueError(f"n_subs: expected >= n_queues ({n_queues}), got {n_subs}")
    space = orders_space(tuple(partition))
    preds, queue_of = _subscriptions(np.random.default_rng(seed), n_subs, n_queues)
    parts = [f"n_subs={n_subs}"] if n_subs != 10_000 else []
    parts += [f"n_queues={n_queues}"] if n_queues != 1_000 else []
    parts += [f"partition={'+'.join(partition)}"] if tuple(partition) != PARTITION else []
    name = f"orders({','.join(parts)})" if parts else "orders"
    return TypedWorkload(name=name, space=space, predicates=preds, queue_of=queue_of, n_queues=n_queues,
                         sample=_sample)
